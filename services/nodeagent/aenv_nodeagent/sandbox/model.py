"""The data of a sandbox on this node: running or paused, what its disk and RAM stand on, and
the files its directory holds.

A sandbox's directory `sandboxes/<id>/` holds its active qcow2 overlay (`disk.qcow2` at first,
`<layer>.active.qcow2` after a capture), its VM's files (`vm/`), the memory it maps or was paused
with (memory/images.py) and, while paused, `sandbox.json`: its record and disk chain, which let a
restarted agent take it back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from aenv.cluster.v1 import cluster_pb2
from aenv_nodeagent.network import NetSlot
from aenv_nodeagent.sandbox.paused_file import PausedDocument, read_paused, write_paused
from aenv_nodeagent.templates import TemplateInputs
from aenv_nodeagent.templates.model import ROOT_DISK_ID, ROOT_NODE
from aenv_nodeagent.vmm.driver import Vm
from aenv_nodeagent.vmm.spec import DiskSpec

FULL = cluster_pb2.PAUSE_MODE_UNSPECIFIED
FILESYSTEM = cluster_pb2.PAUSE_MODE_FILESYSTEM

DISK = "disk.qcow2"  # the first overlay of every sandbox
PAUSED_MARKER = "sandbox.json"  # a paused sandbox's record and chain
PAUSED_STATE = "paused.state"  # the full capture of a pause of a guest that runs on no image
BOOT_RAM = "boot.ram"  # a cold-booted guest's RAM file (sparse, never written back)
ROOT_DISK = DiskSpec(ROOT_DISK_ID, Path(DISK), "qcow2", readonly=False)
OVERLAY_NODE = "ovl"  # + the number of overlays added: the node of a snapshot's new overlay


@dataclass
class Sandbox:
    """A running sandbox: its record, network slot, VM and directory."""

    record: cluster_pb2.SandboxRecord
    slot: NetSlot
    vm: Vm
    directory: Path
    # How long each phase of the operation that made it took (create, resume, fork, …).
    timings_ms: dict[str, float] = field(default_factory=dict)

    @property
    def sandbox_id(self) -> str:
        return self.record.sandbox_id

    @property
    def host(self) -> str:
        """Where the node reaches the guest's ports (DNAT inside the sandbox's netns)."""
        return self.slot.ns_ip


@dataclass
class Chain:
    """What a sandbox's disk and RAM stand on: its template, the frozen layers under its overlay
    (newest first), and the block node QEMU currently writes to."""

    template_id: str
    layers: list[str]
    # The overlay the VM writes to, a file in the sandbox's directory.
    active: str = DISK
    top_node: str = ROOT_NODE
    overlays_added: int = 0

    def resumed(self) -> Chain:
        """The chain of a new VM on the same files: its root node is the active overlay."""
        return Chain(self.template_id, list(self.layers), self.active)


@dataclass
class Paused:
    """A paused sandbox: no VM, its state in its directory."""

    record: cluster_pb2.SandboxRecord
    directory: Path
    chain: Chain
    # The snapstore manifest its state is pushed to (snapshots/paused_claims.py); "" while none is.
    image_id: str = ""

    def save(self) -> None:
        write_paused(self.directory / PAUSED_MARKER, PausedDocument(
            self.record.SerializeToString(), self.chain.template_id, self.chain.layers,
            self.chain.active))

    @classmethod
    def read(cls, marker: Path) -> Paused:
        """A paused sandbox from its `sandbox.json`, living in the marker's directory.

        :raise OSError, ValueError, KeyError: the marker is unreadable.
        :raise StateFileError: written by a newer agent (sandbox/paused_file.py).
        """
        document = read_paused(marker)
        record = cluster_pb2.SandboxRecord.FromString(document.record)
        chain = Chain(document.template_id, document.layers, document.active)
        return cls(record, marker.parent, chain)


@dataclass(frozen=True)
class RestoreImage:
    """What a guest comes back from: a memory image and its device state, or (memory None)
    nothing but its disk, so it cold-boots."""

    inputs: TemplateInputs
    memory: Path | None
    state: Path | None
    # The token the captured envd enforces: /init must present it to hand over a new one.
    guest_token: str
    # While the image is still being made: its device state, awaited once QEMU runs on the
    # memory file (complete by then).
    later_state: Callable[[], Awaitable[Path]] | None = None

    @property
    def boots(self) -> bool:
        return self.memory is None or (self.state is None and self.later_state is None)

    def with_files(self, memory: Path, state: Path) -> RestoreImage:
        return dataclasses.replace(self, memory=memory, state=state)


def boot_image(inputs: TemplateInputs) -> RestoreImage:
    return RestoreImage(inputs, None, None, guest_token="")
