"""What the Docker tests share: the docker CLI, the host cache the containers copy guest artifacts
from, and the image, built once per session from this checkout (scripts/build-test-image.sh)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKER = "/usr/bin/docker"
HOST_CACHE = Path.home() / ".aenv" / "cache"
BUILD_TIMEOUT_S = 3600


def docker(*args: str, timeout: float = 300, check: bool = True) -> str:
    done = subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed: {done.stderr[-2000:]}")
    return done.stdout


def host_network_of(prefix: str) -> list[str]:
    """The host's links, netns and nftables tables whose names carry the prefix."""
    found = []
    for argv in (["ip", "-o", "link", "show"], ["ip", "netns", "list"], ["nft", "list", "tables"]):
        out = subprocess.run(argv, capture_output=True, text=True).stdout
        found += [line for line in out.splitlines() if prefix in line]
    return found


@pytest.fixture(scope="session")
def image() -> str:
    """The image, built from this checkout once per session (the daemon started first when none
    answers) by scripts/build-test-image.sh. It stays tagged afterwards as the next build's cache
    (older test builds are pruned), so a build takes only what changed."""
    started = time.monotonic()
    built = subprocess.run(["bash", str(REPO / "scripts" / "build-test-image.sh")], check=True,
                           timeout=BUILD_TIMEOUT_S, stdout=subprocess.PIPE, text=True)
    tag = built.stdout.strip().splitlines()[-1]
    print(f"image {tag} built in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return tag
