"""A template from a recipe, for real: its steps run in a booted VM of the rootfs through envd,
its start command's process is captured running, and a sandbox created from it has its app
answering at once, as the user and in the directory the recipe left; its ENV held for the build
(steps, start command) only, as E2B's `set_envs`. A failing step fails the create with the
step's name, leaving nothing behind."""

from __future__ import annotations

import dataclasses
import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from aenv_common.errors import InvalidArgument
from aenv_nodeagent.templates.model import BASE_TEMPLATE
from aenv_nodeagent.templates.recipe import Recipe

from ..lifecycle.conftest import Node, node_parts, qemus_under, spec
from ..lifecycle.guest import sh

pytestmark = [pytest.mark.vm, pytest.mark.netns]

FILES_HASH = "0f1e2d3c4b5a"
PAGE = b"<h1>served by the template's start command</h1>\n"


def _step(kind: str, *args: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "args": list(args), "force": False, **extra}


def _context(node: Node) -> None:
    """What the SDK uploads for `copy("site", "www/")`: a gzipped tar of the context's files."""
    contexts = node.state_dir / "templates" / "contexts"
    contexts.mkdir(parents=True, exist_ok=True)
    with tarfile.open(contexts / FILES_HASH, "w:gz") as tar:
        info = tarfile.TarInfo("site/index.html")
        info.size = len(PAGE)
        tar.addfile(info, io.BytesIO(PAGE))


def _register(node: Node, template_id: str, recipe: Recipe) -> None:
    assert node.templates is not None
    base = node.templates.inputs(BASE_TEMPLATE)
    node.templates.register(dataclasses.replace(base, template_id=template_id, recipe=recipe))


async def test_a_recipes_sandboxes_start_with_its_app_running() -> None:
    async with node_parts(own_templates=True) as node:
        _context(node)
        _register(node, "recipe-app", Recipe.from_e2b({
            "steps": [
                _step("RUN", "echo built > /etc/built-by-recipe", "root"),
                _step("ENV", "GREETING", "hello world", "PORT", "8000"),
                _step("USER", "runner", "true"),
                _step("WORKDIR", "/home/runner/app"),
                _step("COPY", "site", "www/", "", "0755", filesHash=FILES_HASH),
                _step("RUN", "id -un > whoami && pwd > where && echo \"$GREETING\" > greeting"),
            ],
            "startCmd": "python3 -m http.server \"$PORT\" --directory www",
            "readyCmd": "curl -sf http://127.0.0.1:8000/index.html",
        }))
        s = spec(template_id="recipe-app", env_vars={"OWN": "sandbox's"})
        sandbox = await node.sandboxes.creates.create(s)

        async def run(script: str, user: str | None = None) -> str:
            return await sh(node.session, sandbox.host, s.envd_access_token, script, user=user)

        # The start command was captured running: its port answers at once, no waiting.
        assert (await run("curl -sf --max-time 5 http://127.0.0.1:8000/index.html")
                ).encode() == PAGE
        # Without a user, the recipe's defaults: its USER and WORKDIR; of the env, the
        # sandbox's own only (the recipe's ENV held for its build: `greeting` below).
        assert await run('id -un; pwd; echo "$GREETING|$OWN"') == (
            "runner\n/home/runner/app\n|sandbox's\n")
        assert await run("cat whoami where greeting /etc/built-by-recipe") == (
            "runner\n/home/runner/app\nhello world\nbuilt\n")
        assert await run("stat -c '%U %a' www www/index.html") == "runner 755\nrunner 755\n"
        assert await run("sudo -n id -un") == "root\n"  # USER runner true: a sudoer
        await node.sandboxes.kills.kill(s.sandbox_id)


async def test_a_failing_step_fails_the_create_naming_it_and_leaves_nothing() -> None:
    async with node_parts(own_templates=True) as node:
        _register(node, "recipe-broken", Recipe.from_e2b({"steps": [
            _step("RUN", "true"),
            _step("RUN", "echo starting; echo 'boom: no such thing' >&2; exit 3"),
            _step("RUN", "touch /never"),
        ]}))
        with pytest.raises(InvalidArgument) as failed:
            await node.sandboxes.creates.create(spec(template_id="recipe-broken"))
        assert failed.value.message == "step 2 (RUN): exited with code 3: boom: no such thing"
        assert qemus_under(node.state_dir) == []
        # No build directory, no snapshot, no lock: nothing of it is left.
        assert not (node.state_dir / "templates" / "recipe-broken").exists()
        assert list(Path(node.state_dir / "sandboxes").glob("*")) == []


async def test_a_rebuild_runs_only_the_steps_after_its_unchanged_ones() -> None:
    first = [_step("RUN", "echo one > /srv-one", "root"), _step("ENV", "X", "1")]
    async with node_parts(own_templates=True) as node:
        assert node.templates is not None

        async def built(template_id: str, steps: list[dict[str, Any]],
                        reuse: bool = True) -> list[str]:
            assert node.templates is not None
            _register(node, template_id, Recipe.from_e2b({"steps": steps}))
            lines: list[str] = []
            await node.templates.get(template_id, lambda line, step="": lines.append(line),
                                     reuse_layers=reuse)
            return lines

        made = await built("layered-a", [*first, _step("RUN", "echo two > /srv-two", "root")])
        assert "step 1: RUN echo one > /srv-one root" in made
        changed = await built("layered-b", [
            *first, _step("RUN", "echo three > /srv-three && cat /srv-one > /copied && "
                          "echo $X >> /copied", "root")])
        assert "steps 1-2 unchanged: their layers are reused" in changed
        assert not any(line.startswith(("step 1:", "step 2:")) for line in changed)

        # The resumed build still had the ENV of the layers it reused (/copied); sandboxes do
        # not ($X is empty).
        for template_id, expected in (("layered-b", "one\nthree\none\n1\n\nno two\n"),
                                      ("layered-a", "one\n\ntwo\n")):
            s = spec(template_id=template_id)
            sandbox = await node.sandboxes.creates.create(s)
            script = ("cat /srv-one; cat /srv-three /copied 2>/dev/null; echo $X; "
                      "cat /srv-two 2>/dev/null || echo no two")
            assert await sh(node.session, sandbox.host, s.envd_access_token, script) == expected
            await node.sandboxes.kills.kill(s.sandbox_id)

        # skip_cache: every step runs again.
        forced = await built("layered-c", [*first], reuse=False)
        assert "step 1: RUN echo one > /srv-one root" in forced
