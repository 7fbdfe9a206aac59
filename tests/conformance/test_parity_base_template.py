"""E2B parity of the `base` template through the official SDK: the tools E2B's base gives agent
code run as the SDK's default user (`docs/e2b-compatibility.md`, "The base template")."""

from __future__ import annotations

import re

import pytest
from e2b import Sandbox

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]


def test_agent_code_finds_python_node_git_and_a_compiler(sbx: Sandbox) -> None:
    out = sbx.commands.run(
        "python --version && pip --version && node --version && npm --version && "
        "git --version && gh --version | head -1 && curl --version | head -1 && "
        "gcc --version | head -1 && make --version | head -1", timeout=120).stdout
    assert re.search(r"^Python 3\.11\.\d+$", out, re.M), out
    assert "(python 3.11)" in out and re.search(r"^v\d+\.\d+\.\d+$", out, re.M), out
    for tool in ("git version", "gh version", "curl ", "gcc ", "GNU Make"):
        assert tool in out, (tool, out)
    assert sbx.commands.run("whoami").stdout == "user\n"
    assert sbx.commands.run("sudo -n whoami").stdout == "root\n"
    # Files the SDK writes are the user's, and Python runs them.
    sbx.files.write("/home/user/hello.py", "import sys; print(sys.version_info[:2])\n")
    assert sbx.commands.run("python hello.py", cwd="/home/user").stdout == "(3, 11)\n"
