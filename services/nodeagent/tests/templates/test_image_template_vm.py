"""A template from an OCI image with no Python, no libc and no account database — busybox-static
alone — for real: the image becomes a base disk, envd runs in it from the tools disk, the recipe
makes E2B's `user`, and a sandbox of it serves its start command's app at once. The image's own
environment held for the build (its steps found busybox by its PATH), as E2B's builder keeps an
image's Env: sandboxes' commands get envd's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from aenv_nodeagent.artifacts import RootfsImage
from aenv_nodeagent.images import BlobCache, OciLayoutSource, build_base_disk
from aenv_nodeagent.templates.model import BASE_TEMPLATE
from aenv_nodeagent.templates.recipe import Recipe
from aenv_testing.oci_layouts import busybox_layout

from ..lifecycle.conftest import node_parts, spec
from ..lifecycle.guest import sh

pytestmark = [pytest.mark.vm, pytest.mark.netns]

DISK_MIB = 256
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _step(kind: str, *args: str) -> dict[str, object]:
    return {"type": kind, "args": list(args), "force": False}


async def test_a_busybox_image_becomes_a_template_whose_app_answers_at_once(
    tmp_path: Path,
) -> None:
    layout = busybox_layout(tmp_path)  # /bin/busybox, /bin/sh; PATH=/bin; no /etc at all
    async with node_parts(own_templates=True) as node:
        assert node.templates is not None
        images = node.state_dir / "images"
        disk = await build_base_disk(OciLayoutSource(layout, "1"), BlobCache(images), images,
                                     DISK_MIB)
        recipe = Recipe.from_e2b({
            "steps": [_step("RUN", "mkdir -p /www && echo 'from busybox' > /www/index.html",
                            "root")],
            "startCmd": "busybox httpd -f -p 8000 -h /www",
            "readyCmd": "wget -q -O- http://127.0.0.1:8000/index.html",
        }).on_image(disk.config)
        base = node.templates.inputs(BASE_TEMPLATE)
        node.templates.register(dataclasses.replace(
            base, template_id="busybox-app", recipe=recipe, disk_mib=DISK_MIB,
            rootfs=RootfsImage(disk.path, disk.digest, ())))

        s = spec(template_id="busybox-app")
        sandbox = await node.sandboxes.creates.create(s)

        async def run(script: str, user: str | None = None) -> str:
            return await sh(node.session, sandbox.host, s.envd_access_token, script, user=user)

        assert await run("wget -q -O- http://127.0.0.1:8000/index.html") == "from busybox\n"
        # E2B's `user` was made for it; the image's PATH (/bin) was the build's, envd's (which
        # holds /bin too) is the sandbox's.
        assert await run('id -un; echo "$PATH"; ls /etc/os-release 2>&1 || true') == (
            f"user\n{GUEST_PATH}\nls: /etc/os-release: No such file or directory\n")
        assert await run("id -un", user="root") == "root\n"
        await node.sandboxes.kills.kill(s.sandbox_id)
