"""Where an image comes from: a registry, an OCI image layout directory, a `docker save` archive.

Whatever the source, pulling it gives the same thing, a `PulledImage`: the image config, the
layers in order (each with the digest of its uncompressed tar, `diff_id`, and where known the
digest of its blob), and a way to open each layer's blob for reading. The unpacker verifies every
layer against those digests as it reads it, so a source only has to find the bytes:

- `RegistrySource` downloads the blobs into the node's `BlobCache` (verified there too, and
  shared by every image that has the same layer);
- `OciLayoutSource` reads `oci-layout`, `index.json` and `blobs/sha256/<hex>` in place;
- `DockerArchiveSource` reads `manifest.json` and the layer tars of a `docker save` archive in
  place, both the classic shape (`<id>/layer.tar`) and Docker 25's OCI layout inside the tar.
"""

from __future__ import annotations

import asyncio
import json
import re
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

import aiohttp

from .auth import NO_CREDENTIALS, Credentials
from .blobs import BlobCache, Readable, digest_hex, sha256_digest
from .errors import BadReference, ImageNotFound, LayerCorrupt, UnsupportedImage
from .manifest import (
    INDEX_TYPES,
    MANIFEST_TYPES,
    Descriptor,
    ImageConfig,
    Manifest,
    check_layer_type,
    document_type,
    parse_config,
    parse_document,
    parse_manifest,
    pick_platform,
)
from .reference import ImageReference, RegistryHosts, parse_reference
from .registry import RegistryClient, new_session

_LAYER_DOWNLOADS = 3  # at once, as Docker does
_REF_NAME = "org.opencontainers.image.ref.name"
_BLOB_MEMBER_RE = re.compile(r"^blobs/sha256/([0-9a-f]{64})$")


@dataclass(frozen=True)
class Layer:
    diff_id: str  # sha256 of the uncompressed tar
    digest: str | None  # sha256 of the blob as stored; None when the source does not say
    size: int | None
    media_type: str
    location: str  # a file path or an archive member: what `open_layer` reads


@dataclass
class PulledImage:
    name: str  # for messages: the reference, or the path of the layout or archive
    digest: str  # identifies the image's content: its manifest's digest (or its config's)
    config: ImageConfig
    layers: list[Layer]
    open_layer: Callable[[Layer], LayerStream]  # blocking: for the unpacker's thread
    downloaded: int = 0  # blobs fetched from a registry by this pull
    cached: int = 0  # blobs the cache already had
    on_corrupt: Callable[[Layer], None] = field(default=lambda layer: None)


# Told of each layer of a registry pull once the cache has it: its number (from 1), how many
# there are, its descriptor, and whether it was downloaded (else the cache had it already).
LayerDone = Callable[[int, int, Descriptor, bool], None]


def layer_line(number: int, count: int, desc: Descriptor, downloaded: bool) -> str:
    """A build log's line of one pulled layer, e.g. `layer 2/5 sha256:0123456789ab (3.1 MiB)
    pulled` (`aenv template pull` draws its progress from these lines)."""
    state = "pulled" if downloaded else "cached"
    return f"layer {number}/{count} {desc.digest[:19]} ({desc.size / 2**20:.1f} MiB) {state}"


class LayerStream(Readable, Protocol):
    def close(self) -> None: ...


class ImageSource(Protocol):
    name: str

    async def pull(self, cache: BlobCache) -> PulledImage: ...


def _layers(manifest: Manifest, config: ImageConfig, image: str,
            location: Callable[[Descriptor], str]) -> list[Layer]:
    if len(manifest.layers) != len(config.diff_ids):
        raise UnsupportedImage(image, f"{len(manifest.layers)} layers but "
                                      f"{len(config.diff_ids)} diff_ids in its config")
    for desc in manifest.layers:
        check_layer_type(desc.media_type, image)
    return [Layer(diff_id, d.digest, d.size, d.media_type, location(d))
            for d, diff_id in zip(manifest.layers, config.diff_ids, strict=True)]


# ---- registry --------------------------------------------------------------------------------


class RegistrySource:
    def __init__(
        self,
        reference: str | ImageReference,
        hosts: RegistryHosts | None = None,
        credentials: Credentials = NO_CREDENTIALS,
        session: aiohttp.ClientSession | None = None,
        on_layer: LayerDone | None = None,
    ) -> None:
        self.ref = reference if isinstance(reference, ImageReference) else parse_reference(
            reference)
        self.name = str(self.ref)
        self._hosts = hosts or RegistryHosts()
        self._credentials = credentials
        self._session = session
        self._on_layer = on_layer

    async def pull(self, cache: BlobCache) -> PulledImage:
        if self._session is not None:
            return await self._pull(RegistryClient(self._session, self._hosts,
                                                   self._credentials), cache)
        async with new_session() as session:
            return await self._pull(RegistryClient(session, self._hosts, self._credentials),
                                    cache)

    async def _pull(self, client: RegistryClient, cache: BlobCache) -> PulledImage:
        body, content_type, digest = await client.manifest(self.ref, self.ref.reference)
        doc = parse_document(body, self.name)
        kind = document_type(doc, content_type)
        if kind in INDEX_TYPES:
            entry = pick_platform(doc, self.name)
            body, content_type, digest = await client.manifest(self.ref, entry.digest)
            doc = parse_document(body, self.name)
            kind = document_type(doc, content_type)
        if kind not in MANIFEST_TYPES:
            raise UnsupportedImage(self.name, f"manifest type {kind!r} (schema 1 is obsolete)")
        manifest = parse_manifest(doc, self.name)
        config = parse_config(await client.blob_bytes(self.ref, manifest.config), self.name)
        layers = _layers(manifest, config, self.name, lambda d: str(cache.path(d.digest)))
        gate = asyncio.Semaphore(_LAYER_DOWNLOADS)

        async def fetch(number: int, desc: Descriptor) -> bool:
            async with gate:
                downloaded = await cache.fetch(desc.digest, desc.size,
                                               client.blob_chunks(self.ref, desc))
            if self._on_layer is not None:
                self._on_layer(number, len(manifest.layers), desc, downloaded)
            return downloaded

        tasks = [asyncio.ensure_future(fetch(n, d)) for n, d in enumerate(manifest.layers, 1)]
        try:
            fetched = await asyncio.gather(*tasks)
        except BaseException:
            # One layer failed (or we were cancelled): stop the others before the session goes.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return PulledImage(
            self.name, digest, config, layers, _open_file,
            downloaded=sum(fetched), cached=len(fetched) - sum(fetched),
            on_corrupt=lambda layer: cache.discard(layer.digest or ""),
        )


def _open_file(layer: Layer) -> LayerStream:
    return open(layer.location, "rb")  # the unpacker closes it


# ---- OCI image layout ------------------------------------------------------------------------


class _LocalSource:
    """An image on this node's disk, `tag` naming one of several: read in place, in a thread
    (parsing a large archive's headers blocks), nothing downloaded."""

    transport = ""  # as skopeo names it, for messages

    def __init__(self, path: Path, tag: str | None = None) -> None:
        self.path, self.tag = path, tag
        self.name = f"{self.transport}:{path}" + (f":{tag}" if tag else "")

    async def pull(self, cache: BlobCache) -> PulledImage:
        return await asyncio.to_thread(self._read)

    def _read(self) -> PulledImage:
        raise NotImplementedError


class OciLayoutSource(_LocalSource):
    """A directory in the OCI image layout (`umoci`, `skopeo copy oci:`, `docker buildx -o
    type=oci` after extraction). `tag` picks an entry of index.json by its ref.name annotation;
    without one the layout must hold exactly one image."""

    transport = "oci"

    def _read(self) -> PulledImage:
        try:
            layout = json.loads((self.path / "oci-layout").read_text())
            index = parse_document((self.path / "index.json").read_bytes(), self.name, "index")
        except (OSError, ValueError):
            raise ImageNotFound(self.name, "no oci-layout and index.json there") from None
        if not isinstance(layout, dict) or "imageLayoutVersion" not in layout:
            raise UnsupportedImage(self.name, "oci-layout has no imageLayoutVersion")
        entry = _pick_entry(index, self.tag, self.name)
        if entry.media_type in INDEX_TYPES:
            entry = pick_platform(parse_document(self._blob(entry), self.name), self.name)
        manifest = parse_manifest(parse_document(self._blob(entry), self.name), self.name)
        config = parse_config(self._blob(manifest.config), self.name)
        layers = _layers(manifest, config, self.name,
                         lambda d: str(self.path / "blobs" / "sha256" / digest_hex(d.digest)))
        return PulledImage(self.name, entry.digest, config, layers, _open_file)

    def _blob(self, desc: Descriptor) -> bytes:
        path = self.path / "blobs" / "sha256" / digest_hex(desc.digest)
        try:
            data = path.read_bytes()
        except OSError:
            raise ImageNotFound(self.name, f"blob {desc.digest} missing") from None
        if sha256_digest(data) != desc.digest:
            raise LayerCorrupt(desc.digest, f"blob hashes to {sha256_digest(data)}")
        return data


def _pick_entry(index: dict[str, Any], tag: str | None, name: str) -> Descriptor:
    entries = [Descriptor.from_json(d, name) for d in index.get("manifests") or []]
    if tag is not None:
        entries = [e for e in entries if e.annotations.get(_REF_NAME) == tag]
    if len(entries) != 1:
        detail = f"no image tagged {tag!r}" if tag else f"{len(entries)} images: name one"
        raise ImageNotFound(name, detail) if not entries else UnsupportedImage(name, detail)
    return entries[0]


# ---- docker save archive ---------------------------------------------------------------------


class DockerArchiveSource(_LocalSource):
    """A `docker save` (or `skopeo copy ... docker-archive:`) tar. `tag` picks one of its images
    by RepoTags (`name:tag` as written there); without one it must hold exactly one image."""

    transport = "docker-archive"

    def _read(self) -> PulledImage:
        try:
            with tarfile.open(self.path) as archive:
                entries = json.loads(self._member(archive, "manifest.json"))
                entry = self._pick(entries)
                config_bytes = self._member(archive, str(entry["Config"]))
                members = [str(m) for m in entry["Layers"]]
        except (OSError, tarfile.TarError, ValueError, KeyError, TypeError) as err:
            raise UnsupportedImage(self.name, f"not a docker archive ({type(err).__name__})"
                                   ) from None
        config = parse_config(config_bytes, self.name)
        if len(members) != len(config.diff_ids):
            raise UnsupportedImage(self.name, "manifest.json and config disagree on layers")
        layers = []
        for member, diff_id in zip(members, config.diff_ids, strict=True):
            blob = _BLOB_MEMBER_RE.match(member)  # Docker 25+: an OCI blob, named by its digest
            layers.append(Layer(diff_id, f"sha256:{blob.group(1)}" if blob else None, None, "",
                                member))
        return PulledImage(self.name, sha256_digest(config_bytes), config, layers,
                           self._open_layer)

    def _pick(self, entries: list[dict[str, Any]]) -> dict[str, Any]:
        if self.tag is not None:
            # Docker writes `busybox:1`, skopeo `docker.io/library/busybox:1`: compare normalised.
            wanted = _normalised(self.tag)
            entries = [e for e in entries
                       if wanted in {_normalised(t) for t in e.get("RepoTags") or []}]
            if not entries:
                raise ImageNotFound(self.name, f"no image tagged {self.tag!r} in the archive")
        if len(entries) != 1:
            raise UnsupportedImage(self.name, f"it holds {len(entries)} images: name one")
        return entries[0]

    @staticmethod
    def _member(archive: tarfile.TarFile, name: str) -> bytes:
        stream = archive.extractfile(name)
        if stream is None:
            raise KeyError(name)
        return stream.read()

    def _open_layer(self, layer: Layer) -> LayerStream:
        archive = tarfile.open(self.path)  # one per layer: the unpacker owns what it opens
        stream = archive.extractfile(layer.location)
        if stream is None:
            archive.close()
            raise UnsupportedImage(self.name, f"layer {layer.location} is not a file")
        return _ClosingMember(stream, archive)


def _normalised(tag: str) -> str:
    try:
        return str(parse_reference(tag))
    except BadReference:
        return tag


class _ClosingMember:
    """An archive member's stream that closes its archive with it."""

    def __init__(self, stream: IO[bytes], archive: tarfile.TarFile) -> None:
        self._stream, self._archive = stream, archive

    def read(self, n: int = -1, /) -> bytes:
        return self._stream.read(n)

    def close(self) -> None:
        self._stream.close()
        self._archive.close()
