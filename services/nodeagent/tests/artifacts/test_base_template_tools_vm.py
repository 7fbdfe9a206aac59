"""The `base` template has what E2B's base gives agent code (docs/e2b-compatibility.md, "The
base template"): each tool runs in a real sandbox, as `user` (the SDKs' default) unless noted.
Guests have no internet here, so installs are proven offline: pip builds a local project, gcc
compiles one. Under TCG each start of node, npm or pip costs seconds, so each runs rarely."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from ..lifecycle.conftest import Node, node_parts, spec
from ..lifecycle.guest import sh

pytestmark = [pytest.mark.vm, pytest.mark.netns]

# A pure-Python project pip can build with the guest's own setuptools (no index, no isolation).
PROJECT = (
    "mkdir -p /tmp/hello/hello && cd /tmp/hello && echo 'WORD = \"hi\"' > hello/__init__.py && "
    "printf '[build-system]\\nrequires = [\"setuptools\"]\\nbuild-backend = "
    "\"setuptools.build_meta\"\\n[project]\\nname = \"hello\"\\nversion = \"1.0\"\\n' "
    "> pyproject.toml"
)


@pytest_asyncio.fixture
async def node() -> AsyncIterator[Node]:
    """The lifecycle tests' node (a conftest fixture there, so not visible from here)."""
    async with node_parts() as parts:
        yield parts


async def test_base_template_has_e2b_base_tools(node: Node) -> None:
    sandbox_spec = spec()
    sandbox = await node.sandboxes.creates.create(sandbox_spec)
    token = sandbox_spec.envd_access_token

    async def run(script: str, user: str = "user") -> str:
        # A dozen interpreters and compilers each start cold under TCG: minutes on a busy host.
        return await sh(node.session, sandbox.host, token, script, user=user, timeout_s=300)

    versions = await run(
        "python --version; python3 --version; pip --version; command -v pip3; command -v npx; "
        "node --version; npm --version; git --version; gh --version | head -1; "
        "curl --version | head -1; wget --version | head -1; gcc --version | head -1; "
        "g++ --version | head -1; make --version | head -1; ssh -V 2>&1")
    print(f"\n{versions}")
    assert re.search(r"^Python 3\.11\.\d+$", versions, re.M), versions  # `python` is python3
    assert "(python 3.11)" in versions, versions  # pip, for that python
    assert "/usr/bin/pip3\n/usr/bin/npx\n" in versions, versions
    assert re.search(r"^v1[89]\.|^v2\d\.", versions, re.M), versions  # node >= 18
    for tool in ("git version", "gh version", "curl ", "GNU Wget", "gcc ", "g++ ", "GNU Make",
                 "OpenSSH"):
        assert tool in versions, (tool, versions)

    # The user's `sudo` takes no password (E2B agents `sudo apt-get …`, `sudo pip install …`).
    assert (await run("sudo -n id -u")).strip() == "0"
    # A CA bundle for curl, git, pip and Python's ssl (Node.js has its own bundled roots).
    certs = await run("grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt; "
                      "python -c 'import os, ssl; "
                      "print(os.path.realpath(ssl.get_default_verify_paths().cafile))'")
    count, cafile = certs.split()
    assert int(count) > 100 and cafile == "/etc/ssl/certs/ca-certificates.crt", certs

    # Debian marks its Python externally managed (PEP 668); /etc/pip.conf lets pip install
    # anyway, as on E2B's python:3.11: a user's install goes to ~/.local, root's to /usr/local.
    assert "global.break-system-packages='true'" in await run("pip config list")
    await run(PROJECT)
    await run("pip install -q --no-index --no-build-isolation /tmp/hello 2>&1")
    where = await run("cd / && python -c 'import hello; print(hello.__file__, hello.WORD)'")
    assert where.split() == ["/home/user/.local/lib/python3.11/site-packages/hello/__init__.py",
                             "hi"], where
    await run("pip install -q --no-index --no-build-isolation /tmp/hello 2>&1", user="root")
    assert (await run("cd / && python -c 'import hello; print(hello.__file__)'", user="root")
            ) == "/usr/local/lib/python3.11/dist-packages/hello/__init__.py\n"
    # venvs (python3-venv; `ensurepip` has its bundled pip wheel, so no index is needed)
    assert (await run("python -m venv --without-pip /tmp/venv && /tmp/venv/bin/python -c "
                      "'import ensurepip, sys; print(sys.prefix, bool(ensurepip.version()))'")
            ) == "/tmp/venv True\n"

    # The compilers and make build and run a program; node runs a script.
    assert await run("cd /tmp && printf 'all:\\n\\tgcc -x c -o hi - <hi.c\\n' > Makefile && "
                     "echo 'int main(void){return 42;}' > hi.c && make -s && "
                     "{ ./hi; echo $?; }") == "42\n"
    assert await run("node -e 'console.log(6 * 7)'") == "42\n"

    # git commits as the user, with nothing configured beyond what a script sets.
    log = await run("cd /tmp && git init -q repo && cd repo && git -c user.name=a "
                    "-c user.email=a@b commit -q --allow-empty -m first && git log --format=%s")
    assert log == "first\n", log
    await node.sandboxes.kills.kill(sandbox_spec.sandbox_id)
