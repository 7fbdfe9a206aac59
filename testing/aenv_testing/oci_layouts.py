"""Images the tests make themselves with umoci, from what the host has."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

# security.capability v2 granting cap_net_raw (bit 13), effective: what `setcap cap_net_raw+ep`
# writes.
CAP_NET_RAW = bytes([0x01, 0x00, 0x00, 0x02, 0x00, 0x20, 0x00, 0x00]) + bytes(12)

BUSYBOX = Path("/bin/busybox")  # busybox-static's


def sh(*argv: str | Path) -> None:
    subprocess.run([str(a) for a in argv], check=True, capture_output=True)


def busybox_layout(work: Path) -> Path:
    """Two layers by umoci: busybox with a symlinked sh and /etc/motd; then motd deleted (a
    whiteout), a hard link `ping` and file capabilities on busybox."""
    layout, bundle = work / "busybox", work / "bundle"
    sh("umoci", "init", "--layout", layout)
    sh("umoci", "new", "--image", f"{layout}:1")
    sh("umoci", "unpack", "--image", f"{layout}:1", bundle)
    rootfs = bundle / "rootfs"
    for folder in ("bin", "etc", "tmp"):
        (rootfs / folder).mkdir(exist_ok=True)
    sh("cp", BUSYBOX, rootfs / "bin" / "busybox")
    (rootfs / "bin" / "sh").symlink_to("busybox")
    (rootfs / "etc" / "motd").write_text("hello\n")
    (rootfs / "tmp").chmod(0o1777)
    sh("umoci", "repack", "--refresh-bundle", "--image", f"{layout}:1", bundle)
    (rootfs / "etc" / "motd").unlink()
    os.link(rootfs / "bin" / "busybox", rootfs / "bin" / "ping")
    os.setxattr(rootfs / "bin" / "busybox", "security.capability", CAP_NET_RAW)
    sh("umoci", "repack", "--image", f"{layout}:1", bundle)
    sh("umoci", "config", "--image", f"{layout}:1", "--config.cmd", "/bin/sh",
       "--config.env", "PATH=/bin")
    sh("umoci", "gc", "--layout", layout)
    return layout


def marker_layout(work: Path, architecture: str = "amd64") -> Path:
    """One layer by umoci holding only `/marker` of random bytes (so its blob is in no cache
    yet), its config saying `architecture`."""
    layout, bundle = work / "marker", work / "marker-bundle"
    sh("umoci", "init", "--layout", layout)
    sh("umoci", "new", "--image", f"{layout}:1")
    sh("umoci", "unpack", "--image", f"{layout}:1", bundle)
    (bundle / "rootfs" / "marker").write_bytes(secrets.token_bytes(4096))
    sh("umoci", "repack", "--image", f"{layout}:1", bundle)
    sh("umoci", "config", "--image", f"{layout}:1", "--architecture", architecture)
    sh("umoci", "gc", "--layout", layout)
    return layout
