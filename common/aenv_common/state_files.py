"""State files: the JSON documents a service writes and reads back across its restarts (and,
for some, another node reads after a pull), each carrying its format version.

One `StateFormat` per file kind is its only reader and writer. The writer always writes the
current format (`"format": N` beside the fields) and replaces the file atomically (a temp file
beside it, then a rename: a crash leaves the old file or the new one). The reader accepts every
format up to the current one: a document with no `format` key is format 1, what agents wrote
before files were versioned, so an upgrade in place reads the state it finds. Older documents
are brought to the current format in memory by explicit steps, one per version (`upgrades[n]`
turns format n into n + 1); the file itself is rewritten only when its owner next saves it.

A document of a newer format than this code knows is refused with `NewerStateFormat`, whose
message names the file, its format and the newest this program reads, so an older agent stops
cleanly instead of misreading state a newer one left (Firecracker refuses a snapshot of an
unsupported version the same way, before touching its contents).

Fields this code does not know, in a document of a format it does know, are a per-kind choice
(`unknown`): REFUSE (`UnknownStateFields`) where every field can change what the state means (a
disk chain, a token), so a field added there must raise the format; IGNORE where a newer agent
may add hints an older one can do without. Both refusals are not ValueErrors: a caller that
skips a malformed file (`MalformedStateFile`, a ValueError) as unreadable lets them through,
so the program stops at start rather than drop state it cannot read.
"""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aenv_common.errors import Internal

FORMAT_KEY = "format"
# The format of a document written before files carried one.
UNVERSIONED = 1

Document = dict[str, Any]
Upgrade = Callable[[Document], Document]


class StateFileError(Internal):
    """A state file this program cannot take as it is."""


class NewerStateFormat(StateFileError):
    """Written by a newer program: reading it could misread it."""

    def __init__(self, source: str, found: int, newest: int, reader: str) -> None:
        super().__init__(f"{source} is format {found}; this {reader} reads formats up to "
                         f"{newest}: upgrade the {reader}")
        self.source = source
        self.found = found
        self.newest = newest


class UnknownStateFields(StateFileError):
    """Fields this program does not know, in a file kind that refuses them: written by a newer
    program (or by hand), and reading it without them could misread it."""


class MalformedStateFile(StateFileError, ValueError):
    """Not a document of its kind: not JSON, not an object, a bad format value. A ValueError
    too: callers that skip an unreadable file skip it as before."""


class Unknown(enum.Enum):
    """What a reader does with a field it does not know in a format it knows."""

    REFUSE = "refuse"
    IGNORE = "ignore"


@dataclass(frozen=True)
class StateFormat:
    """One kind of state file: its current format, the steps from each older one, and the
    fields the current format holds."""

    kind: str  # what the file is, for messages ("paused sandbox")
    current: int
    fields: frozenset[str]
    unknown: Unknown
    reader: str = "node agent"  # the program that reads it, named in a refusal
    upgrades: Mapping[int, Upgrade] = field(default_factory=dict)
    # The document's key for its format: `format`, or what documents of this kind always had.
    version_key: str = FORMAT_KEY

    def __post_init__(self) -> None:
        missing = [n for n in range(UNVERSIONED, self.current) if n not in self.upgrades]
        if missing:
            raise ValueError(f"{self.kind}: no upgrade from format(s) {missing}")

    def encode(self, document: Mapping[str, Any]) -> bytes:
        """The document in the current format, as the file's bytes."""
        if self.version_key in document:
            raise ValueError(f"{self.kind}: the writer sets {self.version_key!r}")
        return json.dumps({self.version_key: self.current, **document}, default=str,
                          separators=(",", ":")).encode()

    def decode(self, data: bytes | str, source: str) -> Document:
        """The fields of the document `data` (named `source` in errors), in the current format.

        :raise NewerStateFormat: written in a format newer than this code reads.
        :raise UnknownStateFields: fields this kind refuses to ignore.
        :raise MalformedStateFile: not a document of this kind.
        """
        try:
            document = json.loads(data)
        except ValueError as exc:
            raise MalformedStateFile(f"{source} is not JSON: {exc}") from exc
        if not isinstance(document, dict):
            raise MalformedStateFile(f"{source} is not a JSON object")
        found = document.pop(self.version_key, UNVERSIONED)
        if not isinstance(found, int) or isinstance(found, bool) or found < UNVERSIONED:
            raise MalformedStateFile(f"{source} has a bad format: {found!r}")
        if found > self.current:
            raise NewerStateFormat(source, found, self.current, self.reader)
        for version in range(found, self.current):
            document = self.upgrades[version](document)
        return self._known(document, source)

    def write(self, path: Path, document: Mapping[str, Any], *, mode: int = 0o600) -> None:
        """Replace `path` atomically with the document in the current format. Blocking."""
        write_atomically(path, self.encode(document), mode=mode)

    def read(self, path: Path) -> Document:
        """The fields of the file at `path`, in the current format. Blocking.

        :raise OSError: the file cannot be read (FileNotFoundError: there is none).
        :raise StateFileError: see `decode`.
        """
        return self.decode(path.read_bytes(), str(path))

    def _known(self, document: Document, source: str) -> Document:
        extra = sorted(set(document) - self.fields)
        if not extra:
            return document
        if self.unknown is Unknown.REFUSE:
            raise UnknownStateFields(
                f"{source} holds fields this {self.reader} does not know ({', '.join(extra)}): "
                f"written by a newer {self.reader}? upgrade the {self.reader}")
        return {name: value for name, value in document.items() if name in self.fields}


def write_atomically(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Replace `path` with `data`: a crash leaves the old file or the new one, never a part."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)  # O_CREAT's mode only applies to a file it creates
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def renamed(old: str, new: str) -> Upgrade:
    """An upgrade step that renames one field."""
    def step(document: Document) -> Document:
        if old in document:
            document[new] = document.pop(old)
        return document
    return step


def defaulted(values: Mapping[str, Any]) -> Upgrade:
    """An upgrade step that adds fields a format introduced, with the value older files mean."""
    def step(document: Document) -> Document:
        return {**values, **document}
    return step
