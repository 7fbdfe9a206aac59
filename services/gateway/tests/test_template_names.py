"""Template names as the SDK sends them (`name`, `name:tag`), and the catalog's bookkeeping of
tags, over in-memory records."""

from __future__ import annotations

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import InvalidArgument, NotFound
from aenv_gateway.core.templates.catalog import TemplateCatalog
from aenv_gateway.core.templates.names import DEFAULT_TAG, parse_name, split_name
from aenv_gateway.core.templates.records import InMemoryTemplateRecords


def test_names_and_tags() -> None:
    assert parse_name("my-env") == split_name("my-env:default")
    assert parse_name("my-env").tag == DEFAULT_TAG
    assert parse_name("py.3_11:V1.2").tag == "V1.2"
    for bad in ("", "Upper", "-dash", "a b", "x" * 129, "ok:bad tag", "ok:-x"):
        with pytest.raises(InvalidArgument):
            parse_name(bad)


async def test_tags_point_at_ready_builds_only() -> None:
    catalog = TemplateCatalog(InMemoryTemplateRecords(), clock=lambda: 1000.0)
    template, build = await catalog.request_build(parse_name("env:v1"), ["latest"],
                                                  cluster_pb2.Resources(vcpus=2))
    assert list(build.tags) == ["v1", "latest"]
    assert await catalog.resolve("base") is None  # not the catalog's: taken as it is
    with pytest.raises(NotFound, match="no ready build yet"):
        await catalog.resolve("env")
    build.image_id = "image-1"
    await catalog.publish(build)
    assert await catalog.resolve("env:v1") == await catalog.resolve("env:latest") == "image-1"
    assert await catalog.resolve(f"{template.template_id}:v1") == "image-1"
    with pytest.raises(NotFound, match=r"^tag 'v2' does not exist for template 'env'$"):
        await catalog.resolve("env:v2")
    again, second = await catalog.request_build(parse_name("env"), [], cluster_pb2.Resources())
    assert again.template_id == template.template_id and again.build_count == 2
    assert second.build_id != build.build_id
    assert await catalog.assign_tags("env:v1", ["stable"]) == (build.build_id, ["stable"])
    assert await catalog.resolve("env:stable") == "image-1"
    await catalog.remove_tags("env", ["stable"])
    with pytest.raises(NotFound):
        await catalog.remove_tags("env", ["stable"])
    assert await catalog.delete("env", building=lambda _: False)
    assert await catalog.resolve("env:v1") is None and not await catalog.delete("env", bool)


async def test_a_tag_may_be_a_ready_build_id_of_the_template() -> None:
    """`name:<build id>` creates that build, as E2B's tag lookup matches build ids too; while
    the build runs (or for another template's build) the 404 says "does not exist", the words
    clients such as Harbor wait on."""
    catalog = TemplateCatalog(InMemoryTemplateRecords(), clock=lambda: 1000.0)
    _, build = await catalog.request_build(parse_name("env:v1"), [], cluster_pb2.Resources())
    _, other = await catalog.request_build(parse_name("other"), [], cluster_pb2.Resources())
    with pytest.raises(NotFound, match=f"^tag '{build.build_id}' does not exist for template"):
        await catalog.resolve(f"env:{build.build_id}")
    for record, image in ((build, "image-1"), (other, "image-2")):
        record.image_id, record.status = image, cluster_pb2.BUILD_STATUS_READY
        await catalog.records.put_build(record)
        await catalog.publish(record)
    assert await catalog.resolve(f"env:{build.build_id}") == "image-1"
    with pytest.raises(NotFound, match="does not exist for template 'env'"):
        await catalog.resolve(f"env:{other.build_id}")
