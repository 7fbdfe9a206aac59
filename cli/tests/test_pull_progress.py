"""`aenv template pull`'s bars: one per phase and one per layer, from the build's log lines."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from e2b.template.logger import LogEntry
from rich.console import Console

from aenv_cli.pull_progress import PullProgress

LINES = [
    "waiting for a node",
    "pulling registry.test/py:3.12",
    "layer 2/3 sha256:0123456789ab (3.1 MiB) pulled",
    "layer 1/3 sha256:abcdef012345 (27.0 MiB) cached",
    "layer 3/3 sha256:fedcba987654 (0.2 MiB) pulled",
    "base disk of registry.test/py:3.12 (sha256:77) ready",
    "booting the template's VM to run its recipe",
    "template ready (total 9.0s)",
]


def _entry(message: str) -> LogEntry:
    return LogEntry(timestamp=datetime.now(UTC), level="info", message=message)


def _states(progress: PullProgress) -> list[tuple[str, bool, str]]:
    return [(t.description, t.finished, t.fields["state"]) for t in progress.progress.tasks]


def test_a_bar_per_phase_and_per_layer_filled_as_the_node_tells() -> None:
    out = io.StringIO()
    with PullProgress(Console(file=out, force_terminal=True, width=120)) as progress:
        for line in LINES[:3]:
            progress(_entry(line))
        assert _states(progress) == [
            ("image registry.test/py:3.12", False, ""),
            ("  layer 1/3", False, "waiting"),
            ("  layer 2/3 sha256:0123456789ab", True, "3.1 MiB pulled"),
            ("  layer 3/3", False, "waiting"),
        ]
        for line in LINES[3:]:
            progress(_entry(line))
    assert _states(progress) == [
        ("image registry.test/py:3.12", True, "unpacked"),
        ("  layer 1/3 sha256:abcdef012345", True, "27.0 MiB cached"),
        ("  layer 2/3 sha256:0123456789ab", True, "3.1 MiB pulled"),
        ("  layer 3/3 sha256:fedcba987654", True, "0.2 MiB pulled"),
        ("template: boot, recipe, capture", True, "ready"),
    ]
    # The other lines are printed above the bars.
    assert "waiting for a node" in out.getvalue() and "template ready" in out.getvalue()


def test_an_image_made_before_has_no_layer_bars() -> None:
    with PullProgress(Console(file=io.StringIO(), force_terminal=True)) as progress:
        for line in (LINES[1], LINES[5]):
            progress(_entry(line))
    assert _states(progress) == [("image registry.test/py:3.12", True, "unpacked")]
