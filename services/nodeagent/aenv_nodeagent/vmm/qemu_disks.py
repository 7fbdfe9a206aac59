"""The disks of one QEMU: their descriptors at launch, and their layer chains over QMP."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from qemu.qmp import EventListener

from aenv_common.errors import NotFound
from aenv_nodeagent.vmm.errors import DiskJobError, QmpCommandFailed, VmStartError
from aenv_nodeagent.vmm.spec import VmSpec

T = TypeVar("T")

_JOB_END_EVENTS = ("BLOCK_JOB_COMPLETED", "BLOCK_JOB_CANCELLED")


@dataclass(frozen=True)
class DiskChain:
    top_node: str
    top_file: Path
    backing_files: list[Path]  # nearest first


class QmpSession(Protocol):
    """What the disk operations need of a QEMU's QMP session (QemuVm has it)."""

    @property
    def pid(self) -> int: ...

    async def execute(
        self, command: str, arguments: Mapping[str, object] | None = None
    ) -> object: ...

    async def run_job(
        self, command: str, arguments: Mapping[str, object], events: tuple[str, ...],
        until: Callable[[EventListener], Awaitable[T]], time_limit: float,
    ) -> T: ...


def open_disks(spec: VmSpec) -> dict[str, list[int]]:
    """Descriptors for `by_fd` disks. A writable disk gets a read-only one too: QEMU reopens a
    node read-only when it becomes a backing layer (a snapshot), and takes from the fd set only
    a descriptor of the access mode it asks for; a node left writable keeps a write lock that
    other QEMUs reading the frozen layer then trip over.

    :raise VmStartError: a disk cannot be opened."""
    fds: dict[str, list[int]] = {}
    try:
        for disk in spec.disks:
            if disk.by_fd:
                modes = [os.O_RDONLY] if disk.readonly else [os.O_RDWR, os.O_RDONLY]
                fds[disk.id] = []
                for mode in modes:
                    fds[disk.id].append(os.open(disk.path, mode | os.O_CLOEXEC))
    except OSError as err:
        close_all(fds)
        raise VmStartError(f"cannot open disk {err.filename}: {err.strerror}") from err
    return fds


def close_all(fds: Mapping[str, Sequence[int]]) -> None:
    for descriptors in fds.values():
        for fd in descriptors:
            os.close(fd)


async def disk_chain(qmp: QmpSession, disk_id: str) -> DiskChain:
    """The layers under disk `disk_id` as QEMU has them open: its top node and file, then
    each backing file as the layer above names it."""
    reply = await qmp.execute("query-block")
    for device in reply if isinstance(reply, list) else []:
        if device.get("qdev") == disk_id and "inserted" in device:
            image = device["inserted"]["image"]
            backing: list[Path] = []
            layer = image
            while name := layer.get("backing-filename"):
                backing.append(Path(name))
                layer = layer.get("backing-image", {})
            return DiskChain(str(device["inserted"]["node-name"]),
                             _image_file(str(image["filename"])), backing)
    raise NotFound(f"QEMU {qmp.pid} has no disk {disk_id!r}")


async def node_file(qmp: QmpSession, node: str) -> Path:
    """The file of block node `node` as this host reaches it: through QEMU's root (a jailed
    QEMU's paths are its own), or through QEMU's descriptor for a disk passed in an fd set."""
    reply = await qmp.execute("query-named-block-nodes", {"flat": True})
    named = next((_image_file(str(entry["file"])) for entry in reply
                  if entry.get("node-name") == node), None) if isinstance(reply, list) else None
    if named is None:
        raise NotFound(f"QEMU {qmp.pid} has no block node {node!r}")
    if named.parent != Path("/dev/fdset"):
        return Path(f"/proc/{qmp.pid}/root{named}")
    fdsets = await qmp.execute("query-fdsets")
    for fdset in fdsets if isinstance(fdsets, list) else []:
        if str(fdset.get("fdset-id")) == named.name and fdset.get("fds"):
            return Path(f"/proc/{qmp.pid}/fd/{fdset['fds'][0]['fd']}")
    raise NotFound(f"QEMU {qmp.pid} holds nothing of {named}")


async def switch_disk_to_overlay(
    qmp: QmpSession, top_node: str, new_node: str, overlay: Path
) -> None:
    """Make `overlay` (a qcow2 file whose backing is the current top layer) the disk's new top
    layer: the VM writes there from now on and the old layer is frozen (external snapshot).
    Call while stopped so no write is in flight.

    :raise QmpError: QEMU refused the overlay (the disk is as it was), or the session broke."""
    await qmp.execute("blockdev-add", {
        "driver": "qcow2", "node-name": new_node, "discard": "unmap",
        "file": {"driver": "file", "filename": str(overlay)},
        # The backing is the node already open (attached by blockdev-snapshot), not a reopen.
        "backing": None,
    })
    try:
        await qmp.execute("blockdev-snapshot", {"node": top_node, "overlay": new_node})
    except QmpCommandFailed:
        await qmp.execute("blockdev-del", {"node-name": new_node})
        raise


async def insert_layers(
    qmp: QmpSession, top_node: str, layers: Sequence[Path],
    add_fd: Callable[[int], Awaitable[int]],
) -> None:
    """Put `layers` (a chain of qcow2 files, newest first, as their headers name it) between
    `top_node` and its backing, in a VM waiting for its incoming state, whose disks are not
    active yet (nothing reads them): those above the node's backing, each opened read-only from
    a descriptor QEMU is handed (`add_fd`: a jailed QEMU may not open them), the oldest over the
    backing, then `top_node` reopened over the newest. `top_node`'s header must name the newest
    already: QEMU reads it again when it activates the disk after the restore, and later
    restores of the disk open the chain by the headers' names.

    :raise NotFound: `top_node` has no backing, or `layers` do not stand on it.
    :raise QmpError: QEMU refused a step; the disk may be neither chain, so the VM must not run.
    :raise OSError: a layer could not be opened.
    """
    reply = await qmp.execute("query-named-block-nodes", {"flat": True})
    nodes = [node for node in reply if isinstance(node, dict)] if isinstance(reply, list) else []
    top = next((node for node in nodes if node.get("node-name") == top_node), None)
    if top is None or not top.get("backing_file"):
        raise NotFound(f"QEMU {qmp.pid} has no block node {top_node!r} over a backing")
    backing = str(top["backing_file"])
    names = [str(layer) for layer in layers]
    if backing not in names[1:]:
        raise NotFound(f"{layers[0]} does not stand on {backing}, the disk's backing in QEMU "
                       f"{qmp.pid}")
    layers = layers[:names.index(backing)]
    below = _node_of(nodes, backing, protocol=False)
    for index in reversed(range(len(layers))):
        fd = os.open(layers[index], os.O_RDONLY | os.O_CLOEXEC)
        try:
            fd_set = await add_fd(fd)
        finally:
            os.close(fd)
        layer = f"{top_node}-under{index}"
        await qmp.execute("blockdev-add", {
            "driver": "qcow2", "node-name": layer, "read-only": True,
            "file": {"driver": "file", "filename": f"/dev/fdset/{fd_set}"}, "backing": below})
        below = layer
    # Every option as at launch (vmm/argv.py): a reopen resets those it is not given.
    await qmp.execute("blockdev-reopen", {"options": [{
        "driver": "qcow2", "node-name": top_node, "read-only": False, "discard": "unmap",
        "file": _node_of(nodes, str(top["file"]), protocol=True, other_than=top_node),
        "backing": below}]})


def _node_of(
    nodes: list[dict[str, object]], filename: str, *, protocol: bool, other_than: str = "",
) -> str:
    """The name of the node opening `filename`: its protocol node (driver `file`) or its format
    node. :raise NotFound: none."""
    for node in nodes:
        name = str(node.get("node-name", ""))
        if (node.get("file") == filename and (node.get("drv") == "file") == protocol
                and name != other_than):
            return name
    raise NotFound(f"no block node opens {filename}")


async def close_writable_fds(qmp: QmpSession) -> None:
    """Remove the writable descriptors of disks passed by fd from their fd sets. Call once
    such a disk is a frozen (read-only) layer, with the VM running, when QEMU closes a
    removed descriptor at once. QEMU reopened the node read-only from the set's read-only
    descriptor, but the write lock stays on the writable one's open file description while
    the set holds it, and other QEMUs reading the layer trip over it."""
    reply = await qmp.execute("query-fdsets")
    for fdset in reply if isinstance(reply, list) else []:
        for entry in fdset.get("fds", []):
            if _opened_for_writing(qmp.pid, int(entry["fd"])):
                await qmp.execute("remove-fd", {"fdset-id": fdset["fdset-id"],
                                                "fd": entry["fd"]})


async def stream_disk(qmp: QmpSession, top_node: str, base: Path, time_limit: float) -> None:
    """Copy into `top_node` every cluster its backing layers above `base` hold, then make
    `base` its backing: the layers in between leave the chain. The VM keeps running.

    :raise DiskJobError: the job failed or was cancelled.
    :raise VmExited: QEMU exited before the job ended.
    :raise QmpError: QEMU refused the job, or the session broke."""
    job = f"stream-{top_node}"
    data = await qmp.run_job("block-stream", {"job-id": job, "device": top_node,
                                              "base": str(base)},
                             _JOB_END_EVENTS, lambda listener: _job_end(listener, job),
                             time_limit)
    if data.get("error") or data.get("event") == "BLOCK_JOB_CANCELLED":
        raise DiskJobError(f"block-stream of {top_node} failed: {data.get('error', 'cancelled')}")


async def _job_end(listener: EventListener, job: str) -> dict[str, object]:
    while True:
        event = await listener.get()
        data = event.get("data")
        if isinstance(data, dict) and data.get("device") == job:
            return {**data, "event": event.get("event")}


def _image_file(filename: str) -> Path:
    """The file of a node QEMU names by a `json:` pseudo-filename (one opened with options)."""
    if filename.startswith("json:"):
        return Path(json.loads(filename[len("json:"):])["file"]["filename"])
    return Path(filename)


def _opened_for_writing(pid: int, fd: int) -> bool:
    try:
        info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
    except OSError:
        return False
    flags = next((int(line.split()[1], 8) for line in info.splitlines()
                  if line.startswith("flags:")), 0)
    return flags & os.O_ACCMODE != os.O_RDONLY
