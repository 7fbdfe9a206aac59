"""Fixtures for guest artifact tests: one artifact cache shared by the whole session (and by
reruns: builds are keyed on their inputs), and the throwaway envd stand-in package."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aenv_nodeagent.artifacts import GuestArtifactsBuild, build_guest_artifacts
from aenv_nodeagent.artifacts.rootfs import RootfsBuild, ensure_base_rootfs_build
from aenv_nodeagent.config import NodeAgentSettings

# The node agent's own cache: artifacts are keyed by their inputs, so tests share what
# `make setup` built (only the stand-in envd tools disk is extra).
TEST_CACHE = NodeAgentSettings().resolved_cache_dir()
STANDIN_ENVD = Path(__file__).parent / "standin_envd"


@dataclass(frozen=True)
class BuiltArtifacts:
    guest: GuestArtifactsBuild
    rootfs: RootfsBuild
    seconds: float


@pytest.fixture(scope="session")
def built_artifacts() -> Iterator[BuiltArtifacts]:
    """Everything a guest needs, built (or reused) once per session."""

    async def build() -> tuple[GuestArtifactsBuild, RootfsBuild]:
        return await asyncio.gather(
            build_guest_artifacts(TEST_CACHE, [STANDIN_ENVD]), ensure_base_rootfs_build(TEST_CACHE)
        )

    started = time.monotonic()
    guest, rootfs = asyncio.run(build())
    built = BuiltArtifacts(guest, rootfs, time.monotonic() - started)
    entries = {**guest.entries, "rootfs-base": rootfs.entry}
    summary = ", ".join(
        f"{kind} " + (f"built in {e.seconds:.1f}s" if e.built else "reused")
        for kind, e in entries.items()
    )
    print(f"\nguest artifacts ({built.seconds:.1f}s total): {summary}")
    yield built
