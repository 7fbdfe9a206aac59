"""The files every image's root gets on top of its layers, as E2B's template builder writes them:
`/etc/hostname`, `/etc/hosts` and `/etc/resolv.conf`.

A container runtime bind-mounts these at run time, so images rarely carry them (a `debian` image
has no `/etc/hosts`); without one, `localhost` does not resolve in the guest. They are applied as
one more layer (an in-memory tar, through the same path-safe unpacking as the image's own layers,
so a symlinked `/etc` in the image cannot point the writes outside the root) and replace whatever
the image had at these paths, as E2B's do. The values are the guest's own (init.sh names it
`aenv`; the resolver is the one aenv's built-in rootfs has).
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

from .sources import Layer
from .unpack import UnpackStats, apply_layer

HOSTNAME = "aenv"
NAMESERVER = "8.8.8.8"
GUEST_FILES: dict[str, str] = {
    "etc/hostname": f"{HOSTNAME}\n",
    "etc/hosts": (
        "127.0.0.1\tlocalhost\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
        "fe00::\tip6-localnet\n"
        "ff00::\tip6-mcastprefix\n"
        "ff02::1\tip6-allnodes\n"
        "ff02::2\tip6-allrouters\n"
        f"127.0.1.1\t{HOSTNAME}\n"
    ),
    "etc/resolv.conf": f"nameserver {NAMESERVER}\n",
}
# Bump when GUEST_FILES change: base disks are kept by image digest, and one made before must not
# be reused without them (templates/bases.py names the disk's folder with it).
GUEST_FILES_VERSION = "g1"
_MTIME = 0  # fixed, so the layer (and its diff id) is the same for every image


def _layer_tar() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, text in GUEST_FILES.items():
            data = text.encode()
            member = tarfile.TarInfo(name)
            member.size, member.mode, member.mtime = len(data), 0o644, _MTIME
            archive.addfile(member, io.BytesIO(data))
    return out.getvalue()


def add_guest_files(root: Path, stats: UnpackStats, image: str) -> None:
    """Write GUEST_FILES into the unpacked `root` of `image`; blocking."""
    blob = _layer_tar()
    diff_id = f"sha256:{hashlib.sha256(blob).hexdigest()}"
    layer = Layer(diff_id=diff_id, digest=None, size=len(blob),
                  media_type="application/vnd.oci.image.layer.v1.tar", location="aenv-guest-files")
    apply_layer(root, io.BytesIO(blob), layer, stats, image)
