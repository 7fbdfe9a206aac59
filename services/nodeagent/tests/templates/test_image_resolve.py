"""A build's image reference resolved to its digest on every build, against a real registry
(Debian's docker-registry on loopback): a tag pushed again names new content, a digest is taken
as it is, an unknown tag fails as the pull would."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from aenv_nodeagent.images import BlobCache, Credentials, RegistryHosts
from aenv_nodeagent.images.errors import ImageNotFound
from aenv_nodeagent.templates.bases import ImageBases
from aenv_testing.oci_layouts import marker_layout
from aenv_testing.registry import REGISTRY_BIN, docker_registry, push

pytestmark = [
    pytest.mark.registry,
    pytest.mark.skipif(not REGISTRY_BIN.exists(), reason="docker-registry is not installed"),
]


async def test_a_tag_resolves_to_what_was_pushed_last(tmp_path: Path) -> None:
    async with docker_registry(tmp_path / "registry") as registry, aiohttp.ClientSession() as s:
        bases = ImageBases(tmp_path / "bases", BlobCache(tmp_path / "blobs"), RegistryHosts(),
                           Credentials({}), s)
        reference = f"{registry.host}/app:1"
        await push(f"oci:{marker_layout(tmp_path / 'one')}:1", registry, "app:1")
        first = await bases.resolve(reference)
        assert first.startswith("sha256:") and await bases.resolve(reference) == first
        await push(f"oci:{marker_layout(tmp_path / 'two')}:1", registry, "app:1")  # again
        second = await bases.resolve(reference)
        assert second != first
        # A digest is what it names: no registry is asked (this one is gone by then).
        pinned = f"{registry.host}/app@{first}"
    assert await bases.resolve(pinned) == first
    async with docker_registry(tmp_path / "empty") as empty, aiohttp.ClientSession() as s:
        bases = ImageBases(tmp_path / "bases", BlobCache(tmp_path / "blobs"), RegistryHosts(),
                           Credentials({}), s)
        with pytest.raises(ImageNotFound):
            await bases.resolve(f"{empty.host}/app:1")
