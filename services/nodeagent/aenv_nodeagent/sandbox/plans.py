"""The four kinds of restore, each a record of only what it has, so that no plan can mix them
(a resume with a fresh directory, a template's restore keeping a slot): made by
`RestoreSources` (sandbox/sources.py), run by the `Restorer` (sandbox/restore.py).

- `FromTemplate`: a new sandbox in a new directory, its overlay over the template's disk; a
  pre-started VM of the template may come from the warm pool.
- `FromSnapshot`: a new sandbox in a new directory, its overlay over the snapshot's top layer (a
  create from a snapshot, or a fork's child); a pre-started VM of the snapshot's template may
  come from the warm pool, re-pointed at the snapshot's memory image and layers.
- `Resume`: a paused sandbox in its own directory, on its own overlay as it is.
- `Reset`: a running sandbox rewound in its own directory and network slot, a new overlay over
  the snapshot's top layer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aenv.cluster.v1 import cluster_pb2
from aenv_nodeagent.network import NetSlot
from aenv_nodeagent.sandbox.model import Chain, RestoreImage
from aenv_nodeagent.templates import TemplateSnapshot

# The image a sandbox's RAM comes back from, resolved once its directory exists (it may pin
# files into it).
ImageOf = Callable[[Path], Awaitable[RestoreImage]]


@dataclass(frozen=True)
class _Plan:
    record: cluster_pb2.SandboxRecord  # published once its guest answers
    directory: Path
    chain: Chain  # what its disk stands on once it runs
    image: ImageOf

    @property
    def sandbox_id(self) -> str:
        return self.record.sandbox_id


@dataclass(frozen=True)
class FromTemplate(_Plan):
    template: TemplateSnapshot


@dataclass(frozen=True)
class FromSnapshot(_Plan):
    backing: Path  # the snapshot's top disk layer
    has_memory: bool  # False: a filesystem-only snapshot, which boots


@dataclass(frozen=True)
class Resume(_Plan):
    pass


@dataclass(frozen=True)
class Reset(_Plan):
    backing: Path  # the snapshot's top disk layer
    slot: NetSlot  # the sandbox's own, kept


RestorePlan = FromTemplate | FromSnapshot | Resume | Reset


def makes_directory(plan: RestorePlan) -> bool:
    """A new sandbox's restore makes its directory (and removes it if it fails)."""
    return isinstance(plan, FromTemplate | FromSnapshot)


def backing_of(plan: RestorePlan) -> Path | None:
    """What a new overlay `disk.qcow2` is made over; None: the VM opens `chain.active` as it
    is."""
    match plan:
        case FromTemplate():
            return plan.template.disk
        case FromSnapshot() | Reset():
            return plan.backing
        case Resume():
            return None
