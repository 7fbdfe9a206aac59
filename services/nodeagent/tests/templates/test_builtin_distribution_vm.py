"""The built-in `base` through a real snapstore between node agents' template stores: the node
that captured it pushes the capture and the disks under it; a node with the same disks restores
base from the pulled capture without booting it; a node whose rootfs and tools disk have other
bytes (built again from the same inputs) pulls the capture with the first node's disks and
restores on those — no node but the first captures."""

from __future__ import annotations

import logging
import shutil
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from aenv_nodeagent.disks import create_overlay
from aenv_nodeagent.templates import TemplateStore
from aenv_nodeagent.templates.guest_disks import PULLED_DISKS_DIR, disk_digests
from aenv_nodeagent.templates.model import BASE_TEMPLATE, with_disks

from ..lifecycle.conftest import Node, node_parts, spec
from ..lifecycle.guest import sh

pytestmark = [pytest.mark.vm, pytest.mark.netns]

PULLED = "built-in template capture pulled from snapstore"
CAPTURED = "template captured"


def _said(caplog: pytest.LogCaptureFixture, message: str) -> int:
    return sum(record.getMessage() == message for record in caplog.records)


async def test_base_is_captured_once_and_restored_by_every_node_on_the_disks_it_was_made_on(
    snapstore: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="aenv_nodeagent.templates")
    def node(node_id: str) -> AbstractAsyncContextManager[Node]:
        return node_parts(own_templates=True, snapstore=snapstore, share_templates=True,
                          node_id=node_id)

    async with node("node-a") as a, node("node-b") as b, node("node-c") as c:
        assert a.templates and a.distribution and b.templates and c.templates
        captured = await a.templates.get(BASE_TEMPLATE)
        assert _said(caplog, CAPTURED) == 1
        await a.distribution.builtins_shared()

        # Node b captures nothing: a's capture, pulled, re-pointed at b's own rootfs path.
        pulled = await b.templates.get(BASE_TEMPLATE)
        assert _said(caplog, PULLED) == 1 and _said(caplog, CAPTURED) == 1
        assert pulled.directory.is_relative_to(b.state_dir)
        assert pulled.boot_seconds == captured.boot_seconds
        s = spec()
        sandbox = await b.sandboxes.creates.create(s)
        assert await sh(b.session, sandbox.host, s.envd_access_token, "echo restored") == (
            "restored\n")
        await b.sandboxes.kills.kill(s.sandbox_id)

        # Node c's disks: the same inputs digests and guest content, other bytes (as built
        # again on another host). It pulls a's capture with a's rootfs and tools disk.
        base = c.templates.inputs(BASE_TEMPLATE)
        rootfs, tools = c.state_dir / "rootfs.qcow2", c.state_dir / "tools.ext4"
        await create_overlay(base.rootfs.path, rootfs)
        shutil.copyfile(base.artifacts.tools_disk, tools)
        with tools.open("r+b") as disk:
            disk.truncate(disk.seek(0, 2) + (1 << 20))
        c.templates.register(with_disks(base, rootfs, tools))
        on_c = await c.templates.get(BASE_TEMPLATE)
        assert _said(caplog, PULLED) == 2 and _said(caplog, CAPTURED) == 1
        assert on_c.boot_seconds == captured.boot_seconds
        now = c.templates.inputs(BASE_TEMPLATE)
        assert now.rootfs.path.is_relative_to(c.state_dir / "templates" / PULLED_DISKS_DIR)
        assert now.artifacts.tools_disk.parent == now.rootfs.path.parent
        assert await disk_digests(now) == await disk_digests(base)
        s = spec()
        sandbox = await c.sandboxes.creates.create(s)
        # Reading files the capture's page cache lacks reads a's disk blocks.
        read = "cat /usr/bin/* | md5sum >/dev/null && echo read"
        assert await sh(c.session, sandbox.host, s.envd_access_token, read) == "read\n"
        await c.sandboxes.kills.kill(s.sandbox_id)

        # c again after a restart: its own disks registered, the capture's backing.json puts
        # the template back on a's (a store that cannot boot: it must not capture).
        cannot: Any = None
        again = TemplateStore(c.templates.root, cannot, cannot, cannot, cannot,
                              boot_timeout_s=1, boot_attempts=1)
        again.register(with_disks(base, rootfs, tools))
        assert (await again.get(BASE_TEMPLATE)).directory == on_c.directory
        assert again.inputs(BASE_TEMPLATE) == now and _said(caplog, CAPTURED) == 1
