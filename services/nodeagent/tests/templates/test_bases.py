"""Base disks kept by image digest: one made before the guest files changed is not reused."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from aenv_nodeagent.images import (
    BaseDisk,
    BlobCache,
    Credentials,
    DiskSize,
    OciLayoutSource,
    RegistryHosts,
)
from aenv_nodeagent.images import rootfs as rootfs_module
from aenv_nodeagent.images.guest_files import GUEST_FILES_VERSION
from aenv_nodeagent.templates import bases as bases_module
from aenv_nodeagent.templates.bases import ImageBases

from ..images.ext4 import Ext4
from ..images.layers import Entry, make_layer, write_layout


async def test_a_base_made_before_the_guest_files_is_not_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    layout = tmp_path / "layout"
    write_layout(layout, [make_layer([Entry("etc", "dir", mode=0o755)], "gzip")])

    async def from_layout(_: Any, cache: BlobCache, out: Path, size: Any) -> BaseDisk:
        return await rootfs_module.build_base_disk(OciLayoutSource(layout), cache, out, size)

    monkeypatch.setattr(bases_module, "build_base_disk", from_layout)
    root = tmp_path / "bases"
    bases = ImageBases(root, BlobCache(tmp_path / "c"), RegistryHosts(), Credentials({}),
                       session=None)  # type: ignore[arg-type]  # never asked: no registry
    first = await bases.base("localhost:1/x:1", DiskSize(64))
    home = first.path.parent
    assert home.name == f"{first.digest.replace(':', '-')}-64-{GUEST_FILES_VERSION}"
    # A disk kept under the name it had before the guest files: it has no /etc/hosts.
    old = root / f"{first.digest.replace(':', '-')}-64"
    os.rename(home, old)
    again = await bases.base("localhost:1/x:1", DiskSize(64))
    assert again.path.parent == home != old
    assert "hosts" in Ext4(again.path, tmp_path).names("/etc")
