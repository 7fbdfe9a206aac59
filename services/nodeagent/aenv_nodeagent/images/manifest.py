"""What the OCI image spec (and Docker's schema 2 before it) says an image is, as data.

An image is reached through JSON documents that point to each other by *descriptors*
(`{mediaType, digest, size}`):

    index / manifest list  --(one per platform)-->  manifest  --> config  (env, cmd, diff_ids)
                                                              --> layers  (tar, gzip or zstd)

A reference (a tag, or a digest) names either an index or a manifest. From an index we pick the
linux/amd64 manifest; the manifest names the config and the ordered layers. The config's
`rootfs.diff_ids` are the digests of the *uncompressed* layers, which lets the unpacker verify a
layer whatever compression it travelled in (and is all a `docker save` archive offers).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .blobs import digest_hex
from .errors import UnsupportedImage, WrongArchitecture

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
# What we send as Accept: every shape we can read (never schema 1, which has no config).
ACCEPT = ", ".join((*INDEX_TYPES, *MANIFEST_TYPES))

OS, ARCHITECTURE = "linux", "amd64"
MAX_DOCUMENT_BYTES = 4 << 20  # manifests and configs are small; a huge one is an attack


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int
    platform: str = ""  # "os/architecture[/variant]", on index entries only
    annotations: dict[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, data: Any, image: str) -> Descriptor:
        try:
            digest, size = str(data["digest"]), int(data["size"])
            digest_hex(digest)
            platform = data.get("platform") or {}
            name = "/".join(
                str(p) for p in (platform.get("os"), platform.get("architecture"),
                                 platform.get("variant")) if p
            )
            return cls(str(data.get("mediaType", "")), digest, size, name,
                       dict(data.get("annotations") or {}))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise UnsupportedImage(image, f"bad descriptor ({type(err).__name__})") from None


@dataclass(frozen=True)
class Manifest:
    config: Descriptor
    layers: list[Descriptor]


@dataclass(frozen=True)
class ImageConfig:
    """The parts of the image config a root disk needs (`raw` keeps the rest for the build)."""

    raw: dict[str, Any]
    diff_ids: list[str]


def parse_document(data: bytes, image: str, what: str = "manifest") -> dict[str, Any]:
    if len(data) > MAX_DOCUMENT_BYTES:
        raise UnsupportedImage(image, f"{what} is larger than {MAX_DOCUMENT_BYTES >> 20} MiB")
    try:
        doc = json.loads(data)
    except ValueError:
        raise UnsupportedImage(image, f"{what} is not JSON") from None
    if not isinstance(doc, dict):
        raise UnsupportedImage(image, f"{what} is not a JSON object")
    return doc


def document_type(doc: dict[str, Any], content_type: str = "") -> str:
    """The media type of a manifest document: its own field, else the HTTP Content-Type, else its
    shape (OCI makes `mediaType` optional)."""
    media_type = str(doc.get("mediaType") or content_type.split(";")[0].strip())
    if media_type in INDEX_TYPES or media_type in MANIFEST_TYPES:
        return media_type
    if doc.get("schemaVersion") == 1:
        return "schema1"
    if "manifests" in doc:
        return OCI_INDEX
    if "layers" in doc and "config" in doc:
        return OCI_MANIFEST
    return media_type or "unknown"


def pick_platform(doc: dict[str, Any], image: str) -> Descriptor:
    """The linux/amd64 manifest of an index (any amd64 variant: all run on our guests)."""
    entries = [Descriptor.from_json(d, image) for d in doc.get("manifests") or []]
    for entry in entries:
        os_name, _, rest = entry.platform.partition("/")
        if os_name == OS and rest.split("/")[0] == ARCHITECTURE:
            return entry
    # Attestations and signatures ride in indexes as unknown/unknown: not worth listing.
    available = sorted({e.platform for e in entries if e.platform and "unknown" not in e.platform})
    raise WrongArchitecture(image, available)


def parse_manifest(doc: dict[str, Any], image: str) -> Manifest:
    try:
        config = Descriptor.from_json(doc["config"], image)
        layers = [Descriptor.from_json(layer, image) for layer in doc["layers"]]
    except (KeyError, TypeError):
        raise UnsupportedImage(image, "manifest has no config or layers") from None
    return Manifest(config, layers)


def parse_config(data: bytes, image: str) -> ImageConfig:
    raw = parse_document(data, image, "image config")
    rootfs = raw.get("rootfs") or {}
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(diff_ids, list) or not all(isinstance(d, str) for d in diff_ids):
        raise UnsupportedImage(image, "image config has no rootfs.diff_ids")
    for diff_id in diff_ids:
        digest_hex(diff_id)
    os_name, arch = raw.get("os"), raw.get("architecture")
    if (os_name, arch) != (OS, ARCHITECTURE) and os_name is not None:
        raise WrongArchitecture(image, [f"{os_name}/{arch}"])
    return ImageConfig(raw, list(diff_ids))


_LAYER_SUFFIXES = ("+gzip", "+zstd", ".tar", ".tar.gzip", "rootfs.diff.tar")


def check_layer_type(media_type: str, image: str) -> None:
    """Refuse layers we cannot unpack (encrypted, bzip2, Windows foreign layers...) before
    downloading them. An empty type (a `docker save` archive names none) is fine: the unpacker
    goes by the bytes' magic whatever the type says."""
    if media_type and ("foreign" in media_type or not media_type.endswith(_LAYER_SUFFIXES)):
        raise UnsupportedImage(image, f"layer media type {media_type!r}")
