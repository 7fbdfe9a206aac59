"""The built-in `base` through a real snapstore between node agents' template stores: the node
that captured it pushes the capture; a node with the same disks restores base from the pulled
capture without booting it; a node whose rootfs has other bytes (built from the same inputs)
captures its own."""

from __future__ import annotations

import dataclasses
import logging
from contextlib import AbstractAsyncContextManager

import pytest

from aenv_nodeagent.artifacts import RootfsImage
from aenv_nodeagent.disks import create_overlay
from aenv_nodeagent.templates.model import BASE_TEMPLATE

from ..lifecycle.conftest import Node, node_parts, spec
from ..lifecycle.guest import sh

pytestmark = [pytest.mark.vm, pytest.mark.netns]

PULLED = "built-in template capture pulled from snapstore"
CAPTURED = "template captured"


def _said(caplog: pytest.LogCaptureFixture, message: str) -> int:
    return sum(record.getMessage() == message for record in caplog.records)


async def test_base_is_captured_once_and_pulled_by_nodes_of_the_same_disks(
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
        sandbox = await b.sandboxes.create(s)
        assert await sh(b.session, sandbox.host, s.envd_access_token, "echo restored") == (
            "restored\n")
        await b.sandboxes.kill(s.sandbox_id)

        # Node c's rootfs: the same inputs digest and guest content, other bytes (as a rootfs
        # built again on another host). a's capture is not for it: c captures base itself.
        base = c.templates.inputs(BASE_TEMPLATE)
        unlike = c.state_dir / "rootfs.qcow2"
        await create_overlay(base.rootfs.path, unlike)
        c.templates.register(dataclasses.replace(
            base, rootfs=RootfsImage(unlike, base.rootfs.digest, base.rootfs.packages)))
        own = await c.templates.get(BASE_TEMPLATE)
        assert _said(caplog, PULLED) == 1 and _said(caplog, CAPTURED) == 2
        assert own.boot_seconds != captured.boot_seconds
