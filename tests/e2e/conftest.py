"""Shared by the end-to-end tests that drive the platform through the official E2B SDK."""

from __future__ import annotations

import pytest
from e2b import Sandbox

# Written aside and renamed: a reader never sees the file truncated mid-write.
COUNTER = ("i=0; while true; do i=$((i+1)); echo $i > /tmp/counter.tmp; "
           "mv /tmp/counter.tmp /tmp/counter; sleep 0.5; done")


def counter(sandbox: Sandbox) -> int:
    """The value the guest's COUNTER process last published."""
    return int(sandbox.files.read("/tmp/counter").strip())


@pytest.fixture
def sdk_env(e2b_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK reads its endpoints and key from the process environment."""
    for name, value in e2b_env.items():
        if name.startswith("E2B_"):
            monkeypatch.setenv(name, value)
    monkeypatch.delenv("E2B_DEBUG", raising=False)
