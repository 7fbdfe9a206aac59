"""Fixtures for the launcher tests: Platforms whose services are the stand-ins (real processes,
real etcd), stopped after the test whatever happens."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

# The stand-ins and the testkit live beside this file; pytest puts this directory on sys.path
# only in some collection orders (e.g. not when collected beside the `tests` package).
sys.path.insert(0, str(Path(__file__).parent))

import pytest
from aenv_cli_testkit import STANDIN_COMMANDS, PlatformFactory, standin_env

from aenv_cli.platform import Platform
from aenv_testing.platform_ports import free_platform_ports


@pytest.fixture
async def make_platform(tmp_path: Path) -> AsyncIterator[PlatformFactory]:
    """Builds stand-in platforms (default home: tmp_path/home); stops all of them at teardown."""
    made: list[Platform] = []

    def make(
        home: Path | None = None, overrides: Mapping[str, Sequence[str]] | None = None
    ) -> Platform:
        commands = {**STANDIN_COMMANDS, **(overrides or {})}
        home = home or tmp_path / "home"
        platform = Platform(home, free_platform_ports(), commands=commands, base_env=standin_env())
        made.append(platform)
        return platform

    try:
        yield make
    finally:
        for platform in reversed(made):
            await platform.stop()
