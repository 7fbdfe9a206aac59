"""The disks under a captured guest, through snapstore by their bytes' digest.

Every node builds the built-in templates' rootfs and the tools disk from its own artifacts, and
those builds are not byte for byte reproducible (mkfs picks UUIDs and hash seeds, packages and
file systems carry build times), while a captured guest's page cache holds its disks' blocks: a
capture restores only on the very disks it was made on. So a capture travels with them: each
is pushed once as `guest-disk-<sha256>` (its chunks dedupe against everything the store holds)
— a built-in template's rootfs and tools disk, a built template's tools disk (its rootfs travels
with its inputs) — and a node whose own disk has other bytes pulls that one into `disks/` (kept
by digest, shared by its templates) and restores on it. Making the builds reproducible instead
would need every tool in the chain (debootstrap, mkfs.ext4, package post-install scripts)
pinned and proven on every host: distributing the bytes is proven by their digest.

A disk goes from snapstore (`collect`) once no capture there names it (each capture's labels
carry its disks' digests) and it was pushed over `min_age_s` ago (a capture follows its disks'
push).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path

from aenv_common.errors import Internal, NotFound
from aenv_nodeagent.artifacts.digest import SUFFIX as DIGEST_SUFFIX
from aenv_nodeagent.artifacts.digest import content_digest
from aenv_nodeagent.snapshots.persistence import SnapshotPersistence
from aenv_nodeagent.templates.bounds import mark_used
from aenv_nodeagent.templates.model import TemplateInputs, with_disks

log = logging.getLogger(__name__)

PULLED_DISKS_DIR = "disks"
PUSHED_AT = "pushed_at"
DISK_MANIFEST_PREFIX = "guest-disk-"
_DISK = "disk"
# A template's capture (distribution.snapshot_manifest: `template-<id>-<key>`, a 24-hex key).
_CAPTURE = re.compile(r"template-.+-[0-9a-f]{24}$")


def disk_manifest(digest: str) -> str:
    return DISK_MANIFEST_PREFIX + digest.removeprefix("sha256:")


def disk_paths(inputs: TemplateInputs) -> dict[str, Path]:
    """The disks a guest of the template has open: its root's backing, the tools disk."""
    return {"rootfs": inputs.rootfs.path, "tools_disk": inputs.artifacts.tools_disk}


async def disk_digests(inputs: TemplateInputs) -> dict[str, str]:
    """The bytes of the template's disks (`disk_paths`): a restored guest's page cache holds
    their blocks, so a capture restores only on disks of these digests.

    :raise OSError: a disk cannot be read.
    """
    paths = disk_paths(inputs)
    digests = await asyncio.gather(*(content_digest(path) for path in paths.values()))
    return dict(zip(paths, digests, strict=True))


class GuestDisks:
    def __init__(self, persistence: SnapshotPersistence, root: Path) -> None:
        self._persistence = persistence
        self._dir = root / PULLED_DISKS_DIR

    def push_soon(
        self, inputs: TemplateInputs, digests: Mapping[str, str], stored: set[str],
        names: tuple[str, ...] = ("rootfs", "tools_disk"),
    ) -> list[str]:
        """Pushes, in the background, the template's disks of `names` snapstore lacks; returns
        their manifests (the capture goes once they are in: `persisted`)."""
        pushing = []
        for name, path in disk_paths(inputs).items():
            if name not in names:
                continue
            manifest = disk_manifest(digests[name])
            if manifest in stored:
                continue

            async def files(path: Path = path) -> dict[str, Path]:
                return {_DISK: path}

            async def pushed(manifest: str = manifest) -> None:
                log.info("built-in template disk pushed to snapstore",
                         extra={"manifest_id": manifest})

            labels = {"kind": "template-disk", "template_id": inputs.template_id,
                      PUSHED_AT: str(int(time.time()))}
            self._persistence.push_soon(manifest, files, pushed, labels)
            pushing.append(manifest)
        return pushing

    async def adopt(
        self, inputs: TemplateInputs, recorded: Mapping[str, str], staging: Path
    ) -> TemplateInputs:
        """`inputs` on disks of the `recorded` digests: this node's own where their bytes are
        alike, else pulled (once per digest on this node).

        :raise NotFound: snapstore lacks a disk.
        :raise Internal: a pulled disk's bytes are not the digest it was pulled as.
        :raise OSError: a disk cannot be read or placed.
        """
        own, paths = await disk_digests(inputs), disk_paths(inputs)
        for name, digest in recorded.items():
            if own.get(name) != digest:
                paths[name] = await self._disk(digest, staging)
        return with_disks(inputs, paths["rootfs"], paths["tools_disk"])

    async def _disk(self, digest: str, staging: Path) -> Path:
        target = self._dir / digest.replace(":", "-")
        if target.is_file():
            mark_used(target)
            return target
        files = await self._persistence.pull(disk_manifest(digest), staging / digest[7:23])
        pulled = files[_DISK]
        if await content_digest(pulled) != digest:  # keeps the digest beside it, as below
            raise Internal(f"snapstore's disk {digest} holds other bytes")
        pulled.chmod(0o444)  # a backing file: nothing writes to it
        self._dir.mkdir(parents=True, exist_ok=True)
        kept = pulled.with_name(pulled.name + DIGEST_SUFFIX)
        os.replace(kept, target.with_name(target.name + DIGEST_SUFFIX))
        os.replace(pulled, target)
        log.info("built-in template disk pulled from snapstore", extra={"digest": digest})
        return target

    async def collect(self, min_age_s: float, now: float) -> list[str]:
        """Deletes from snapstore the disks no template capture there names, pushed over
        `min_age_s` ago; returns their manifests. None while a capture names no disks (one
        pushed before disks travelled: what it stands on is unknown).

        :raise AenvError: snapstore cannot be read.
        """
        named: set[str] = set()
        stored = await self._persistence.manifests()
        for manifest in stored:
            labels = await self._labels(manifest) if _CAPTURE.match(manifest) else {}
            if labels.get("kind") == "template":
                if not {"rootfs", "tools_disk"} <= labels.keys():
                    return []
                named |= {disk_manifest(labels["rootfs"]), disk_manifest(labels["tools_disk"])}
        collected = []
        for manifest in stored:
            if not manifest.startswith(DISK_MANIFEST_PREFIX) or manifest in named:
                continue
            pushed = (await self._labels(manifest)).get(PUSHED_AT)
            if pushed is not None and now - int(pushed) > min_age_s:
                self._persistence.forget_soon(manifest)
                collected.append(manifest)
        if collected:
            log.info("template disks no capture names deleted from snapstore",
                     extra={"manifests": collected})
        return collected

    async def _labels(self, manifest: str) -> dict[str, str]:
        try:
            return await self._persistence.labels(manifest)
        except NotFound:
            return {}  # deleted meanwhile
