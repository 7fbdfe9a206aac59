"""The base disks of templates built from OCI images: an image reference pulled (mirrors,
insecure registries and credentials are the node's configuration; a build may add its own
login) and made a read-only qcow2 (`images/`), kept at
`<root>/<manifest digest>-<disk MiB>-<guest files version>/` for as long as templates stand on
it, so a second build of the same image and size reuses it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

import aiohttp

from aenv_nodeagent.images import (
    BaseDisk,
    BlobCache,
    Credentials,
    DiskSize,
    RegistryHosts,
    RegistrySource,
    build_base_disk,
    parse_reference,
)
from aenv_nodeagent.images.auth import Login
from aenv_nodeagent.images.guest_files import GUEST_FILES_VERSION
from aenv_nodeagent.images.reference import ImageReference
from aenv_nodeagent.images.registry import RegistryClient
from aenv_nodeagent.images.sources import LayerDone
from aenv_nodeagent.templates.bounds import mark_used


class ImageBases:
    def __init__(
        self, root: Path, cache: BlobCache, hosts: RegistryHosts, credentials: Credentials,
        session: aiohttp.ClientSession,
    ) -> None:
        self._root = root
        self._cache = cache
        self._hosts = hosts
        self._credentials = credentials
        self._session = session
        self._locks: dict[tuple[str, DiskSize], asyncio.Lock] = {}

    async def base(
        self, reference: str, size: DiskSize, login: Login | None = None,
        on_layer: LayerDone | None = None,
    ) -> BaseDisk:
        """The image's base disk, as large as `size` says; `on_layer` is told of each layer
        pulled (none when the disk was made before).

        :raise AenvError: one of `images.errors` (unknown image, refused credentials, wrong
            architecture, a corrupt layer, a disk too small, ...).
        """
        ref = parse_reference(reference)
        source = RegistrySource(ref, self._hosts, self._with(ref, login), self._session,
                                on_layer)
        async with self._locks.setdefault((str(ref), size), asyncio.Lock()):
            self._root.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix=".base-", dir=self._root))
            try:
                built = await build_base_disk(source, self._cache, work, size)
                return self._keep(built, work)
            finally:
                shutil.rmtree(work, ignore_errors=True)

    async def resolve(self, reference: str, login: Login | None = None) -> str:
        """The digest the reference names at its registry now (a tag asked each time).

        :raise AenvError: one of `images.errors` (unknown image, refused credentials, ...).
        """
        ref = parse_reference(reference)
        if ref.digest:
            return ref.digest
        client = RegistryClient(self._session, self._hosts, self._with(ref, login))
        _, _, digest = await client.manifest(ref, ref.reference)
        return digest

    def _with(self, ref: ImageReference, login: Login | None) -> Credentials:
        if login is None:
            return self._credentials
        return Credentials({**self._credentials.by_host, ref.registry: login})

    def drop_unless_used(self, disk: Path, in_use: set[Path]) -> None:
        """Removes a base disk no registered template stands on (its build failed)."""
        if disk not in in_use and disk.parent.parent == self._root:
            shutil.rmtree(disk.parent, ignore_errors=True)

    def _keep(self, built: BaseDisk, work: Path) -> BaseDisk:
        """Move the new disk to its digest's place, unless an earlier build put one there: a
        template may stand on that one already (its overlays name its path)."""
        # The guest files' version too: a disk made before they changed is not reused.
        home = self._root / (f"{built.digest.replace(':', '-')}-{built.disk_mib}"
                             f"-{GUEST_FILES_VERSION}")
        if not (home / built.path.name).exists():
            shutil.rmtree(home, ignore_errors=True)
            os.rename(work, home)
            home.chmod(0o755)  # every sandbox's QEMU reads the disk (mkdtemp made it 0700)
            work.mkdir()  # for the caller's cleanup
        mark_used(home / built.path.name)
        return dataclasses.replace(built, path=home / built.path.name)
