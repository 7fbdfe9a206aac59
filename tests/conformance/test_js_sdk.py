"""Runs the JS conformance suite (tests/conformance/js, `node --test`) with the official npm
`e2b` package against the shared platform, so it is part of `make test`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from aenv_cli.platform import Platform

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

JS_DIR = Path(__file__).parent / "js"
REPO = Path(__file__).resolve().parents[2]


def test_js_sdk_suite(platform: Platform, e2b_env: dict[str, str]) -> None:
    node = shutil.which("node")
    assert node, "node is required (make setup-node)"
    assert (REPO / "node_modules" / "e2b" / "package.json").exists(), "run npm install"
    done = subprocess.run(
        [node, "--test", "--test-reporter=tap", *sorted(map(str, JS_DIR.glob("*.test.mjs")))],
        cwd=REPO, env=e2b_env, capture_output=True, text=True, timeout=600,
    )
    print(done.stdout[-8000:])
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-4000:]
    assert "\n# fail 0" in done.stdout and "\n# pass 0" not in done.stdout
