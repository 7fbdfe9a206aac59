"""A service that finds state it cannot read at start stops with one line naming it, exit 2."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from aenv_common.config import CommonSettings
from aenv_common.service_main import run_service
from aenv_common.state_files import NewerStateFormat


@pytest.fixture(autouse=True)
def _root_logger_kept() -> Iterator[None]:
    """run_service sets up the root logger: put it back for the tests after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


class _FindsNewerState:
    def __init__(self) -> None:
        self.stopped = False

    async def start(self) -> None:
        raise NewerStateFormat("/state/sandboxes/s/sandbox.json", 3, 1, "node agent")

    async def stop(self) -> None:
        self.stopped = True


def test_state_of_a_newer_format_stops_the_service_with_its_reason(
        capfd: pytest.CaptureFixture[str]) -> None:
    service = _FindsNewerState()
    with pytest.raises(SystemExit) as exited:
        run_service("nodeagent", CommonSettings(), lambda: service)
    assert exited.value.code == 2 and service.stopped
    err = capfd.readouterr().err
    assert ("cannot start: /state/sandboxes/s/sandbox.json is format 3; this node agent reads "
            "formats up to 1: upgrade the node agent") in err
    assert "Traceback" not in err
