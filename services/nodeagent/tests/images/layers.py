"""Hand-made image layers and OCI layouts for the image tests: tar entries of every kind,
compressed as asked, with the digests a manifest and config would give them."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zstandard

from aenv_nodeagent.images.manifest import OCI_INDEX, OCI_MANIFEST
from aenv_nodeagent.images.sources import Layer

MTIME = 1_700_000_000
_TYPES = {
    "file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
    "hardlink": tarfile.LNKTYPE, "chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE,
    "fifo": tarfile.FIFOTYPE,
}
_MEDIA = {"gzip": "+gzip", "zstd": "+zstd", "": ""}


@dataclass
class Entry:
    name: str
    kind: str = "file"
    data: bytes = b""
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    link: str = ""
    dev: tuple[int, int] = (0, 0)
    xattrs: dict[str, bytes] = field(default_factory=dict)
    mtime: int = MTIME


def tar_bytes(entries: list[Entry]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            info = tarfile.TarInfo(e.name)
            info.type = _TYPES[e.kind]
            info.mode, info.uid, info.gid, info.mtime = e.mode, e.uid, e.gid, e.mtime
            info.linkname = e.link
            info.devmajor, info.devminor = e.dev
            info.pax_headers = {f"SCHILY.xattr.{k}": v.decode("utf-8", "surrogateescape")
                                for k, v in e.xattrs.items()}
            info.size = len(e.data) if e.kind == "file" else 0
            tar.addfile(info, io.BytesIO(e.data) if e.kind == "file" else None)
    return out.getvalue()


def whiteout(path: str) -> Entry:
    parent, _, name = path.rpartition("/")
    return Entry(f"{parent}/.wh.{name}" if parent else f".wh.{name}")


def opaque(directory: str) -> Entry:
    return Entry(f"{directory}/.wh..wh..opq")


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def compress(data: bytes, compression: str) -> bytes:
    if compression == "gzip":
        return gzip.compress(data, mtime=0)
    if compression == "zstd":
        return zstandard.ZstdCompressor().compress(data)
    return data


def make_layer(entries: list[Entry], compression: str = "gzip") -> tuple[bytes, Layer]:
    """The layer's blob and its `Layer` (digests as a manifest and config would say)."""
    plain = tar_bytes(entries)
    blob = compress(plain, compression)
    media = "application/vnd.oci.image.layer.v1.tar" + _MEDIA[compression]
    return blob, Layer(sha256(plain), sha256(blob), len(blob), media, "")


def _put(layout: Path, data: bytes) -> dict[str, Any]:
    digest = sha256(data)
    (layout / "blobs" / "sha256" / digest.split(":")[1]).write_bytes(data)
    return {"digest": digest, "size": len(data)}


def write_layout(
    layout: Path, layers: list[tuple[bytes, Layer]], tag: str = "latest",
    architecture: str = "amd64", config: dict[str, Any] | None = None, as_index: bool = False,
) -> str:
    """An OCI image layout holding one image of these layers; returns its manifest digest."""
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    image_config = {
        "architecture": architecture, "os": "linux", "config": config or {},
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for _, layer in layers]},
    }
    config_desc = {"mediaType": "application/vnd.oci.image.config.v1+json",
                   **_put(layout, json.dumps(image_config).encode())}
    layer_descs = [{"mediaType": layer.media_type, **_put(layout, blob)}
                   for blob, layer in layers]
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                           "config": config_desc, "layers": layer_descs}).encode()
    top = {"mediaType": OCI_MANIFEST, **_put(layout, manifest),
           "platform": {"os": "linux", "architecture": architecture}}
    if as_index:
        index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [top]})
        top = {"mediaType": OCI_INDEX, **_put(layout, index.encode())}
    top["annotations"] = {"org.opencontainers.image.ref.name": tag}
    (layout / "index.json").write_text(json.dumps(
        {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [top]}))
    return str(top["digest"])
