"""`sandbox.json`: a paused sandbox's record and disk chain, the one file a restarted agent (or
another node, after a pull) takes the sandbox back from.

Format 1 (also what agents wrote before files carried a format): the record (`SandboxRecord`,
serialized, hex), the template, the frozen layers under its overlay (newest first) and the
overlay itself. Unknown fields are refused: each says what the disk stands on, and a chain read
without one would resume the guest on the wrong disk. The record is a protobuf message, which
keeps fields it does not know, so a newer agent's record fields need no new format.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aenv_common.state_files import StateFormat, Unknown

PAUSED_FILE = StateFormat(
    "paused sandbox", 1, frozenset({"record", "template_id", "layers", "active"}),
    Unknown.REFUSE)


@dataclass(frozen=True)
class PausedDocument:
    record: bytes  # a serialized SandboxRecord
    template_id: str
    layers: list[str]
    active: str


def write_paused(path: Path, document: PausedDocument) -> None:
    """Replace `path` atomically (0600: the record holds the envd token). Blocking."""
    PAUSED_FILE.write(path, {"record": document.record.hex(),
                             "template_id": document.template_id,
                             "layers": document.layers, "active": document.active})


def read_paused(path: Path) -> PausedDocument:
    """:raise OSError: unreadable. :raise StateFileError: not a format this agent reads.
    :raise ValueError, KeyError, TypeError: a field is missing or malformed."""
    data = PAUSED_FILE.read(path)
    return PausedDocument(bytes.fromhex(data["record"]), str(data["template_id"]),
                          [str(x) for x in data["layers"]], str(data["active"]))
