"""Template captures a dead node agent left half-way: their QEMUs ended, their folders removed.

A capture (templates/store.py) works in `<templates>/<id>/.build-*/` under the template's capture
lock (`<templates>/<id>/.<key>.lock`, an flock). Its QEMU runs in a session of its own, so it
outlives an agent that is SIGKILLed mid-capture, while the flock goes with the agent's process.
Nodes of one host may share the templates folder: a `.build-*` folder is abandoned only when no
capture lock of its template is held by any live process.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

from aenv_nodeagent.vmm.argv import VmFiles
from aenv_nodeagent.vmm.process import qemu_owning

log = logging.getLogger(__name__)

BUILD_PREFIX = ".build-"  # templates/store.py's work folders


@dataclass(frozen=True)
class Abandoned:
    killed: list[int]  # the captures' QEMUs
    removed: list[Path]  # their work folders


def end_abandoned_builds(templates_dir: Path) -> Abandoned:
    """SIGKILL the QEMUs of captures no live process holds the lock of, and remove their folders.
    A QEMU killed here may still be exiting: its folder goes at once, the kernel keeps the files
    it holds open until it is gone."""
    killed: list[int] = []
    removed: list[Path] = []
    for template in _template_folders(templates_dir):
        builds = sorted(template.glob(f"{BUILD_PREFIX}*"))
        if not builds or _capture_under_way(template):
            continue
        for build in builds:
            pid = qemu_owning(VmFiles.in_dir(build / "vm").pidfile)
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            shutil.rmtree(build, ignore_errors=True)
            removed.append(build)
    if removed:
        log.warning(
            "abandoned template captures ended",
            extra={"qemu_killed": killed, "builds_removed": [str(path) for path in removed]},
        )
    return Abandoned(killed, removed)


def _template_folders(templates_dir: Path) -> list[Path]:
    if not templates_dir.is_dir():
        return []
    return [path for path in templates_dir.iterdir() if path.is_dir()]


def _capture_under_way(template: Path) -> bool:
    """Whether a live process holds one of the template's capture locks (a capture of another
    node agent sharing the folder)."""
    for lock in template.glob(".*.lock"):
        try:
            fd = os.open(lock, os.O_RDWR)
        except OSError:
            continue  # removed meanwhile: nobody holds it
        try:
            # flock conflicts between open file descriptions, also those of this process.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # also releases the probe's own lock
    return False
