"""Retired marks against the whole platform: a deleted template's node-side template is marked
retired in the real etcd, the node agent drops its copy, says it holds none, and — every live
node having said so — the mark and the acknowledgements leave etcd: nothing piles up."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from e2b import AsyncTemplate

from aenv.cluster.v1 import cluster_pb2
from aenv_cli.platform import Platform
from aenv_common.cluster import RETIRED_TEMPLATES, ClusterStore
from aenv_nodeagent.templates.retire import CLEARED
from aenv_testing.oci_layouts import busybox_layout
from aenv_testing.registry import docker_registry, push

from .conftest import opened_store, until

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns,
              pytest.mark.registry, pytest.mark.asyncio(loop_scope="session")]


@pytest_asyncio.fixture(loop_scope="session")
async def store(platform: Platform) -> AsyncIterator[ClusterStore]:
    async with opened_store(platform.etcd_endpoints) as opened:
        yield opened


async def test_a_retired_mark_leaves_etcd_once_no_node_holds_the_template(
    platform: Platform, sdk_env: None, store: ClusterStore, tmp_path: Path,
) -> None:
    layout = busybox_layout(tmp_path / "layout")
    async with docker_registry(tmp_path / "registry") as registry:
        await push(f"oci:{layout}:1", registry, "e2e/retired:1")
        template = AsyncTemplate().from_image(f"{registry.host}/e2e/retired:1").run_cmd(
            "echo retired > /marked", user="root")
        info = await AsyncTemplate.build(template, "e2e-retired", memory_mb=512)
    image = info.build_id  # the node-side template a build makes is named by the build
    assert await store.get_template(image) is not None  # this etcd, this prefix
    headers = {"X-API-Key": os.environ["E2B_API_KEY"]}
    async with httpx.AsyncClient(base_url=os.environ["E2B_API_URL"], headers=headers) as http:
        assert (await http.delete("/templates/e2e-retired")).status_code == 204
    assert await store.get_template(image) is None  # retired: marked, then its record gone

    async def gone() -> bool:
        mark = await store.get_record(RETIRED_TEMPLATES, image, cluster_pb2.TemplateRecord)
        _, acks = await store.snapshot(CLEARED, cluster_pb2.TemplateRecord)
        return mark is None and not any(a.record.template_id == image for a in acks.values())

    # The node's sweeps (every minute) drop its copy, acknowledge, then prune the mark.
    await until(gone, 240, "the retired mark and its acknowledgements to leave etcd")
