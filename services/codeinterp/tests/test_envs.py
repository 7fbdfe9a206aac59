"""The sandbox's variables from envd: asked again only when envd's init marker changed."""

from __future__ import annotations

import os
from pathlib import Path

from aenv_codeinterp.envs import EnvdEnvs

from .conftest import FakeEnvd


def _replace(marker: Path) -> None:
    staged = marker.with_suffix(".new")
    staged.write_text("")
    os.replace(staged, marker)


async def test_variables_are_asked_again_only_after_a_new_init(tmp_path: Path) -> None:
    envd = FakeEnvd()
    marker = tmp_path / "envd-init"
    try:
        envs = EnvdEnvs(port=envd.port, marker=str(marker))
        envd.variables = {"A": "1"}
        _replace(marker)
        assert await envs.fetch("tok") == {"A": "1"}
        envd.variables = {"A": "2"}
        assert await envs.fetch("tok") == {"A": "1"}  # no /init since: not asked
        assert envd.tokens == ["tok"]
        _replace(marker)
        assert await envs.fetch("tok") == {"A": "2"}
        assert len(envd.tokens) == 2
    finally:
        envd.close()


async def test_without_a_marker_every_fetch_asks(tmp_path: Path) -> None:
    envd = FakeEnvd()
    try:
        envs = EnvdEnvs(port=envd.port, marker=str(tmp_path / "absent"))
        envd.variables = {"A": "1"}
        assert await envs.fetch(None) == {"A": "1"}
        envd.variables = {"A": "2"}
        assert await envs.fetch(None) == {"A": "2"}
        assert len(envd.tokens) == 2
    finally:
        envd.close()
