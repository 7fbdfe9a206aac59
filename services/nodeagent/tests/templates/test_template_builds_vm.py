"""The node agent's BuildTemplate, end to end over its servicer: an image pulled from a real
registry (Debian's docker-registry on loopback), its recipe run, the capture published; the log
streamed, then the result. A sandbox of it starts with its app answering; a template built on
it (`from_template`) adds its own steps; an unknown image fails the build with the image's
one-line reason and keeps the previous version usable; the built templates outlive a restart; a
node whose tools disk has other bytes creates from another's capture on that node's tools disk."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_common.errors import AenvError
from aenv_nodeagent.images import BlobCache, RegistryHosts
from aenv_nodeagent.images.auth import NO_CREDENTIALS
from aenv_nodeagent.servicer import NodeAgentServicer
from aenv_nodeagent.templates.bases import ImageBases
from aenv_nodeagent.templates.builds import TemplateBuilds
from aenv_nodeagent.templates.cache import TemplateCache
from aenv_nodeagent.templates.guest_disks import PULLED_DISKS_DIR, disk_digests
from aenv_nodeagent.templates.model import with_disks
from aenv_testing.oci_layouts import busybox_layout
from aenv_testing.registry import docker_registry, push

from ..lifecycle.conftest import Node, node_parts, spec
from ..lifecycle.guest import sh

pytestmark = [pytest.mark.vm, pytest.mark.netns, pytest.mark.registry]


def _builds(node: Node, published: list[cluster_pb2.TemplateRecord]) -> TemplateBuilds:
    assert node.templates is not None and node.saved is not None
    images = node.state_dir / "images"
    bases = ImageBases(images / "bases", BlobCache(images), RegistryHosts(), NO_CREDENTIALS,
                       node.session)

    async def publish(record: cluster_pb2.TemplateRecord) -> None:
        published.append(record)

    return TemplateBuilds(node.templates, bases, node.saved, publish, node.distribution)


def _request(template_id: str, **fields: Any) -> nodeagent_pb2.BuildTemplateRequest:
    return nodeagent_pb2.BuildTemplateRequest(template_id=template_id, build_id="b1", **fields)


def _run(*args: str) -> nodeagent_pb2.TemplateStep:
    return nodeagent_pb2.TemplateStep(type="RUN", args=list(args))


async def _build(
    servicer: NodeAgentServicer, request: nodeagent_pb2.BuildTemplateRequest
) -> tuple[list[str], nodeagent_pb2.BuildTemplateResult]:
    lines, result = [], None
    context = cast(grpc.aio.ServicerContext, None)  # the handler never reads it
    async for event in servicer.BuildTemplate(request, context):
        if event.HasField("log"):
            lines.append(event.log.message)
        else:
            result = event.result
    assert result is not None
    return lines, result


async def test_images_from_a_registry_become_templates_and_outlive_a_restart(
    tmp_path: Path,
) -> None:
    layout = busybox_layout(tmp_path / "layout")
    async with docker_registry(tmp_path / "registry") as registry, \
            node_parts(own_templates=True) as node:
        await push(f"oci:{layout}:1", registry, "tools/busybox:1")
        published: list[cluster_pb2.TemplateRecord] = []
        servicer = NodeAgentServicer(node.sandboxes, cluster_pb2.NodeRecord,
                                     _builds(node, published))
        lines, result = await _build(servicer, _request(
            "web", from_image=f"{registry.host}/tools/busybox:1",
            steps=[_run("mkdir -p /www && echo v1 > /www/index.html", "root")],
            start_cmd="busybox httpd -f -p 8000 -h /www",
            ready_cmd="wget -q -O- http://127.0.0.1:8000/index.html",
            # No free room asked past the files: the disk is the size given.
            resources=cluster_pb2.Resources(disk_mib=256), min_free_disk_mib=0))
        assert f"pulling {registry.host}/tools/busybox:1" in lines
        assert "step 1: RUN mkdir -p /www && echo v1 > /www/index.html root" in lines
        assert result.template.template_id == "web" and published == [result.template]
        assert result.template.default_resources.disk_mib == 256
        assert {"base_pull", "base_unpack", "capture", "total"} <= set(result.phases_ms)

        s = spec(template_id="web")
        sandbox = await node.sandboxes.creates.create(s)
        assert await sh(node.session, sandbox.host, s.envd_access_token,
                        "wget -q -O- http://127.0.0.1:8000/index.html") == "v1\n"
        await node.sandboxes.kills.kill(s.sandbox_id)

        # On top of it: its steps, then ours; its start command.
        _, child = await _build(servicer, _request(
            "web-child", from_template="web",
            steps=[_run("echo child > /www/child.html", "root")]))
        assert child.template.template_id == "web-child"
        s = spec(template_id="web-child")
        sandbox = await node.sandboxes.creates.create(s)
        assert await sh(node.session, sandbox.host, s.envd_access_token,
                        "wget -q -O- http://127.0.0.1:8000/index.html "
                        "http://127.0.0.1:8000/child.html") == "v1\nchild\n"
        await node.sandboxes.kills.kill(s.sandbox_id)

        # A failed rebuild names the image and keeps the version that works.
        with pytest.raises(AenvError, match=r"image .*tools/nosuch:1 not found"):
            await _build(servicer, _request("web", from_image=f"{registry.host}/tools/nosuch:1"))
        assert node.templates is not None and node.templates.has("web")
        s = spec(template_id="web")
        await node.sandboxes.creates.create(s)
        await node.sandboxes.kills.kill(s.sandbox_id)

        # A failed build of another size leaves no base disk of its own; web's stays.
        bases = node.state_dir / "images" / "bases"
        before = sorted(p.name for p in bases.iterdir())
        with pytest.raises(AenvError, match=r"step 1 \(RUN\): exited with code 3"):
            await _build(servicer, _request(
                "web-broken", from_image=f"{registry.host}/tools/busybox:1",
                steps=[_run("exit 3", "root")], resources=cluster_pb2.Resources(disk_mib=300)))
        assert sorted(p.name for p in bases.iterdir()) == before

        # A restarted node agent knows what this one built (saved beside its templates).
        assert node.templates is not None
        restarted = _builds(node, published)
        for template_id in ("web", "web-child"):
            node.templates.unregister(template_id)
        assert sorted(restarted.load_saved()) == ["web", "web-child"]
        assert node.templates.inputs("web-child").recipe.start_cmd == (
            "busybox httpd -f -p 8000 -h /www")


async def test_a_template_built_on_one_node_is_created_on_another(
    tmp_path: Path, snapstore: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    layout = busybox_layout(tmp_path / "layout")
    async with docker_registry(tmp_path / "registry") as registry, \
            node_parts(own_templates=True, snapstore=snapstore, share_templates=True,
                       node_id="node-a") as a, \
            node_parts(own_templates=True, snapstore=snapstore, share_templates=True,
                       node_id="node-b") as b:
        await push(f"oci:{layout}:1", registry, "tools/busybox:1")
        servicer = NodeAgentServicer(a.sandboxes, cluster_pb2.NodeRecord, _builds(a, []))
        await _build(servicer, _request(
            "shared-web", from_image=f"{registry.host}/tools/busybox:1",
            steps=[_run("mkdir -p /www && echo shared > /www/index.html", "root")],
            start_cmd="busybox httpd -f -p 8000 -h /www",
            ready_cmd="wget -q -O- http://127.0.0.1:8000/index.html"))
        assert a.templates is not None and a.distribution is not None
        built = await a.templates.get("shared-web")
        await a.distribution.shared("shared-web", a.templates.inputs("shared-web").key())

        # Node b never built it, and its tools disk has other bytes (built again from the same
        # inputs): it pulls the template on first use, captured snapshot and a's tools disk
        # included, and restores on those.
        assert b.templates is not None and not b.templates.has("shared-web")
        assert b.saved is not None
        own = b.saved.defaults
        tools = b.state_dir / "tools.ext4"
        shutil.copyfile(own.artifacts.tools_disk, tools)
        with tools.open("r+b") as disk:
            disk.truncate(disk.seek(0, 2) + (1 << 20))
        monkeypatch.setattr(b.saved, "_defaults", with_disks(own, own.rootfs.path, tools))
        s = spec(template_id="shared-web")
        sandbox = await b.sandboxes.creates.create(s)
        assert await sh(b.session, sandbox.host, s.envd_access_token,
                        "wget -q -O- http://127.0.0.1:8000/index.html") == "shared\n"
        pulled = await b.templates.get("shared-web")
        assert pulled.directory.is_relative_to(b.state_dir)
        assert pulled.boot_seconds == built.boot_seconds  # a's capture, not one of its own
        on = b.templates.inputs("shared-web")
        assert on.artifacts.tools_disk.parent == b.state_dir / "templates" / PULLED_DISKS_DIR
        assert await disk_digests(on) == await disk_digests(a.templates.inputs("shared-web"))
        await b.sandboxes.kills.kill(s.sandbox_id)
        assert not list((b.state_dir / "templates").glob(".pull-*"))
        assert b.saved is not None and b.saved.path("shared-web").is_file()

        # Evicted from b's bounded cache (nothing stands on it), it comes back from snapstore.
        async def forget(template_id: str, disk: Path) -> None:
            await b.pool.forget_template(template_id, disk)

        cache = TemplateCache(b.templates, 0, b.sandboxes.templates_in_use, forget,
                              min_idle_s=0)
        assert await cache.trim() == ["shared-web"] and not pulled.directory.exists()
        s = spec(template_id="shared-web")
        sandbox = await b.sandboxes.creates.create(s)
        assert await sh(b.session, sandbox.host, s.envd_access_token,
                        "wget -q -O- http://127.0.0.1:8000/index.html") == "shared\n"
        assert (await b.templates.get("shared-web")).boot_seconds == built.boot_seconds
        assert await cache.trim() == []  # in use now
        await b.sandboxes.kills.kill(s.sandbox_id)

        # An id snapstore does not hold stays unknown.
        with pytest.raises(AenvError, match="not found"):
            await b.templates.get("never-built")
