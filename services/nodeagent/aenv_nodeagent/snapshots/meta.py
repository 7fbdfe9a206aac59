"""`snapshot.json`: what a snapshot on this node is (`SnapshotMeta`), and the one reader and
writer of the file that keeps it across restarts (and carries it through snapstore to other
nodes: snapshots/persistence.py).

Format 1 (also what agents wrote before files carried a format): SnapshotMeta's fields, its
directory aside (where the file lies says it; older files hold a stale one, not read). Unknown
fields are refused: they decide how the snapshot restores (its layers, its memory, its secret
token, whether its image is still to be made), and one read without them would restore another
guest than was captured. A field added must raise the format, with its upgrade step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from aenv_common.state_files import StateFormat, Unknown

SNAPSHOT_META = "snapshot.json"


@dataclass
class SnapshotMeta:
    snapshot_id: str
    sandbox_id: str
    name: str
    # The template the captured guest was restored from, and the exact inputs it was built with
    # (accelerator, kernel, artifacts, size): a restore elsewhere would not boot the same guest.
    template_id: str
    template_key: str
    accelerator: str
    kernel_version: str
    artifacts_digest: str
    # Frozen disk layers, newest first; the first is this snapshot's own.
    layers: list[str]
    # The access token the captured envd enforces (a secret: the file is 0600, never logged).
    guest_token: str
    envd_version: str
    created_at: float
    has_memory: bool = True
    # Internal snapshots (a fork's capture) are not listed and go away with their operation.
    hidden: bool = False
    # Stored in snapstore (snapshots/persistence.py): another node can restore it.
    persisted: bool = False
    # Its memory image is still being made from a frozen copy of the guest (memory/capture.py); a
    # node agent that finds it so on start makes it (memory/deferred.py), or drops the snapshot.
    image_pending: bool = False
    directory: Path = field(default=Path("."), compare=False)
    # The volumes its guest had mounted, without tickets (volumes/mounts.py `saved_mounts`):
    # its record says them, and the gateway grants a create from it its own.
    volume_mounts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def state(self) -> Path:
        return self.directory / "state"

    @property
    def captured(self) -> bool:
        """The capture stream, or the memory image made from it, is on disk (or being made)."""
        return (self.image_pending or self.state.is_file()
                or (self.directory / "device.state").is_file())

    @property
    def names(self) -> list[str]:
        return [self.name] if self.name else [self.snapshot_id]


_DIRECTORY = "directory"
SNAPSHOT_FILE = StateFormat(
    "snapshot", 1, frozenset(f.name for f in fields(SnapshotMeta)), Unknown.REFUSE)


def write_meta(meta: SnapshotMeta) -> None:
    """Replace its `snapshot.json` atomically (0600: it holds the guest's token). Blocking."""
    document = asdict(meta)
    del document[_DIRECTORY]
    SNAPSHOT_FILE.write(meta.directory / SNAPSHOT_META, document)


def read_meta(meta_file: Path, directory: Path) -> SnapshotMeta:
    """A snapshot.json, for a snapshot living in `directory` (not necessarily its own).

    :raise OSError: unreadable. :raise StateFileError: not a format this agent reads.
    :raise TypeError: a field is missing.
    """
    data = SNAPSHOT_FILE.read(meta_file)
    data[_DIRECTORY] = directory
    return SnapshotMeta(**data)
