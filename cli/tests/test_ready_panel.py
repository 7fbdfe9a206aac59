"""`aenv up`'s ready panel names the built-in templates a first start still builds in the
background (code-interpreter-v1's rootfs), from what the gateway lists as built in."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from aenv_cli.platform import Platform
from aenv_cli.up import (
    BACKGROUND_TEMPLATES,
    fetch_pending_templates,
    pending_templates,
    ready_panel,
)
from aenv_testing.platform_ports import free_platform_ports

LISTED = [{"templateID": "base", "names": ["base"]},
          {"templateID": "code-interpreter-v1", "names": ["code-interpreter-v1"]}]


def test_a_listed_template_is_not_pending() -> None:
    assert pending_templates(LISTED) == []
    assert pending_templates(LISTED[:1]) == ["code-interpreter-v1"]
    assert pending_templates([]) == list(BACKGROUND_TEMPLATES)


def test_an_entry_without_names_counts_by_its_id() -> None:
    assert pending_templates([{"templateID": "code-interpreter-v1"}]) == []
    assert pending_templates(["junk", {"names": None}]) == ["code-interpreter-v1"]


def _started(tmp_path: Path) -> Platform:
    platform = Platform(tmp_path / "home", free_platform_ports())
    platform._api_key = "e2b_test"  # as start() leaves it
    return platform


def test_the_panel_says_what_is_still_being_built(tmp_path: Path) -> None:
    console = Console(width=200, record=True)
    console.print(ready_panel(_started(tmp_path), ["code-interpreter-v1"]))
    text = console.export_text()
    assert "code-interpreter-v1 is being built in the background" in text
    assert "`aenv status` lists it" in text


def test_the_panel_says_nothing_when_nothing_is_pending(tmp_path: Path) -> None:
    console = Console(width=200, record=True)
    console.print(ready_panel(_started(tmp_path), []))
    assert "background" not in console.export_text()


async def test_an_unreachable_gateway_means_nothing_pending(tmp_path: Path) -> None:
    # Nothing listens on the fresh ports: the panel is shown without the line, not an error.
    assert await fetch_pending_templates(_started(tmp_path)) == []
