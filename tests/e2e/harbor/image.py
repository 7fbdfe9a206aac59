"""The Debian image with Python that the Harbor tasks start `FROM`: made here from the host's
own apt sources (mmdebstrap, as the guest artifacts are) into an OCI layout by umoci, kept in
the shared cache under its inputs' hash (a second run reuses it), pushed to a loopback registry
by the caller."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from aenv_nodeagent.artifacts.rootfs import SUITE, host_apt_sources
from aenv_nodeagent.config import NodeAgentSettings
from aenv_testing.oci_layouts import sh

VERSION = "1"
TAG = "1"
# minbase has bash, tar, gzip and coreutils (Harbor's transfers need them); pytest for a verifier.
PACKAGES = ("python3", "python3-pytest", "procps")
DOCS = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*")


def _key() -> str:
    digest = hashlib.sha256(f"{VERSION}\0{SUITE}\0{','.join(PACKAGES)}".encode())
    for source in host_apt_sources():
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def debian_python_layout() -> Path:
    """The image's OCI layout (tag `TAG`), made once per inputs."""
    root = NodeAgentSettings().resolved_cache_dir() / "test-images"  # the shared cache
    layout = root / f"debian-python-{_key()}"
    if layout.exists():
        return layout
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".debian-python-", dir=root))
    try:
        made, bundle = work / "layout", work / "bundle"
        sh("umoci", "init", "--layout", made)
        sh("umoci", "new", "--image", f"{made}:{TAG}")
        sh("umoci", "unpack", "--image", f"{made}:{TAG}", bundle)
        rootfs = bundle / "rootfs"
        os.rmdir(rootfs)  # mmdebstrap makes it
        sh("mmdebstrap", "--quiet", "--mode=root", "--variant=minbase", "--format=directory",
           "--include=" + ",".join(PACKAGES),
           *(f"--dpkgopt=path-exclude={docs}" for docs in DOCS),
           SUITE, rootfs, *host_apt_sources())
        for junk in ("var/lib/apt/lists", "var/cache/apt"):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
        sh("umoci", "repack", "--image", f"{made}:{TAG}", bundle)
        sh("umoci", "config", "--image", f"{made}:{TAG}", "--config.cmd", "bash",
           "--config.env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        sh("umoci", "gc", "--layout", made)
        try:
            os.rename(made, layout)
        except OSError:
            if not layout.exists():  # not a concurrent maker's: a real failure
                raise
        return layout
    finally:
        shutil.rmtree(work, ignore_errors=True)
