"""A volume's metadata in SQLite: inodes, directory entries with stable cookies, the chunk map
(ino, index) -> digest, and which chunks the local working copy holds.

Used only from its volume's own thread (see `volume.py`), so every operation is one transaction
and operations never interleave. The database is a local cache of the backend's state plus what
was changed since the last sync: durability comes from the backend, so SQLite runs without
fsync, and a copy not closed cleanly is rebuilt from the backend instead of trusted. Every
change is remembered by key (the "dirty" sets) so a sync logs only the rows it changed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any

from aenv_snapstore.volumes.layout import ChunkKey, Segment
from aenv_snapstore.volumes.model import (
    FIRST_COOKIE,
    ROOT_INO,
    ROOT_MODE,
    Kind,
    name_bytes,
    name_str,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS inodes(ino INTEGER PRIMARY KEY, kind INTEGER, mode INTEGER,
    nlink INTEGER, uid INTEGER, gid INTEGER, size INTEGER, atime INTEGER, mtime INTEGER,
    ctime INTEGER, parent INTEGER, target BLOB);
CREATE TABLE IF NOT EXISTS dirents(dir INTEGER, name BLOB, ino INTEGER, cookie INTEGER,
    PRIMARY KEY(dir, name)) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS dirents_by_cookie ON dirents(dir, cookie);
CREATE TABLE IF NOT EXISTS chunks(ino INTEGER, idx INTEGER, digest TEXT,
    PRIMARY KEY(ino, idx)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS present(ino INTEGER, idx INTEGER, PRIMARY KEY(ino, idx)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value);
"""
# Counters every segment carries (a replayed volume continues them; none is ever reused).
COUNTERS = ("next_ino", "next_cookie", "quota", "used", "files")


@dataclass
class Inode:
    """One inode row; `parent` is a directory's parent (for ".."), `target` a symlink's."""

    ino: int
    kind: int
    mode: int
    nlink: int
    uid: int
    gid: int
    size: int
    atime: int
    mtime: int
    ctime: int
    parent: int = 0
    target: bytes | None = None

    def row(self) -> list[object]:
        values = list(astuple(self))[1:]
        values[-1] = name_str(self.target) if self.target is not None else None
        return values

    @classmethod
    def from_row(cls, ino: int, row: list[Any]) -> Inode:
        kind, mode, nlink, uid, gid, size, atime, mtime, ctime, parent, target = row
        raw = name_bytes(target) if isinstance(target, str) else None
        return cls(ino, kind, mode, nlink, uid, gid, size, atime, mtime, ctime,
                   parent, raw)


@dataclass
class MetaCut:
    """The rows changed since the last sync, as they are at the cut, and the chunks whose data
    changed (read by the caller in the same turn of the volume's thread)."""

    segment: Segment
    data: set[ChunkKey]
    inode_keys: set[int]
    dirent_keys: set[tuple[int, bytes]]


@dataclass
class _Dirty:
    inodes: set[int] = field(default_factory=set)
    dirents: set[tuple[int, bytes]] = field(default_factory=set)
    data: set[ChunkKey] = field(default_factory=set)


class MetaDb:
    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.executescript(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF; PRAGMA cache_size=-16384;" + _SCHEMA)
        self._dirty = _Dirty()
        self.counters: dict[str, int] = {}
        self._load_counters()
        # Bumped by every change: `commit` waits for a sync whose cut saw its generation.
        self.gen = 0

    def close(self) -> None:
        self._conn.close()

    def _load_counters(self) -> None:
        rows = dict(self._conn.execute("SELECT key, value FROM meta").fetchall())
        self.counters = {name: int(rows.get(name, 0)) for name in COUNTERS}

    def meta_value(self, key: str) -> object:
        row = self._conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta_value(self, key: str, value: object) -> None:
        self._conn.execute("INSERT OR REPLACE INTO meta VALUES(?, ?)", (key, value))

    @contextmanager
    def txn(self) -> Iterator[None]:
        """One operation: all of it or (on any error) none of it, counters included."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._conn.executemany("INSERT OR REPLACE INTO meta VALUES(?, ?)",
                                   self.counters.items())
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            self._load_counters()
            raise
        self.gen += 1

    def take_ino(self) -> int:
        ino = self.counters["next_ino"]
        self.counters["next_ino"] = ino + 1
        return ino

    # Inodes.
    def inode(self, ino: int) -> Inode | None:
        row = self._conn.execute(
            "SELECT kind, mode, nlink, uid, gid, size, atime, mtime, ctime, parent, target "
            "FROM inodes WHERE ino=?", (ino,)).fetchone()
        return None if row is None else Inode(ino, *row)

    def put_inode(self, node: Inode) -> None:
        self._conn.execute("INSERT OR REPLACE INTO inodes VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
                           astuple(node))
        self._dirty.inodes.add(node.ino)

    def delete_inode(self, ino: int) -> None:
        """The inode and its chunks: their map rows go at the next sync (marked dirty)."""
        self._conn.execute("DELETE FROM inodes WHERE ino=?", (ino,))
        self._dirty.inodes.add(ino)
        self.drop_chunks(ino, 0, deleted=True)

    # Directory entries.
    def dirent(self, dir_ino: int, name: bytes) -> tuple[int, int] | None:
        row = self._conn.execute("SELECT ino, cookie FROM dirents WHERE dir=? AND name=?",
                                 (dir_ino, name)).fetchone()
        return None if row is None else (row[0], row[1])

    def put_dirent(self, dir_ino: int, name: bytes, ino: int) -> None:
        """A new entry gets a new cookie (after every other in the directory), never reused."""
        cookie = max(self.counters["next_cookie"], FIRST_COOKIE)
        self.counters["next_cookie"] = cookie + 1
        self._conn.execute("INSERT OR REPLACE INTO dirents VALUES(?,?,?,?)",
                           (dir_ino, name, ino, cookie))
        self._dirty.dirents.add((dir_ino, name))

    def delete_dirent(self, dir_ino: int, name: bytes) -> None:
        self._conn.execute("DELETE FROM dirents WHERE dir=? AND name=?", (dir_ino, name))
        self._dirty.dirents.add((dir_ino, name))

    def has_entries(self, dir_ino: int) -> bool:
        row = self._conn.execute("SELECT 1 FROM dirents WHERE dir=? LIMIT 1", (dir_ino,))
        return row.fetchone() is not None

    def list_dir(self, dir_ino: int, after: int, limit: int) -> list[tuple[bytes, int, Inode]]:
        rows = self._conn.execute(
            "SELECT d.name, d.cookie, i.ino, i.kind, i.mode, i.nlink, i.uid, i.gid, i.size, "
            "i.atime, i.mtime, i.ctime, i.parent, i.target FROM dirents d JOIN inodes i "
            "ON i.ino = d.ino WHERE d.dir=? AND d.cookie>? ORDER BY d.cookie LIMIT ?",
            (dir_ino, after, limit)).fetchall()
        return [(r[0], r[1], Inode(*r[2:])) for r in rows]

    # Chunks: the synced map and the local working copy's presence.
    def chunk(self, ino: int, idx: int) -> str | None:
        row = self._conn.execute("SELECT digest FROM chunks WHERE ino=? AND idx=?", (ino, idx))
        found = row.fetchone()
        return None if found is None else str(found[0])

    def is_present(self, ino: int, idx: int) -> bool:
        row = self._conn.execute("SELECT 1 FROM present WHERE ino=? AND idx=?", (ino, idx))
        return row.fetchone() is not None

    def set_present(self, ino: int, indices: range | list[int]) -> None:
        self._conn.executemany("INSERT OR IGNORE INTO present VALUES(?, ?)",
                               ((ino, i) for i in indices))

    def mark_written(self, ino: int, indices: range | list[int]) -> None:
        """Local data changed: present (and newer than the map) until the next sync."""
        self.set_present(ino, indices)
        self._dirty.data.update((ino, i) for i in indices)

    def drop_chunks(self, ino: int, first: int, *, deleted: bool = False) -> None:
        """Chunks `first`.. are gone (truncation, deletion): the sync deletes their map rows.
        Until then the local copy (zeros, or nothing past the end) is the truth, so a truncated
        file's chunks count as present: a stale map row is never fetched back into it."""
        indices: set[int] = set()
        for table in ("chunks", "present"):
            rows = self._conn.execute(f"SELECT idx FROM {table} WHERE ino=? AND idx>=?",
                                      (ino, first)).fetchall()
            indices.update(r[0] for r in rows)
        self._dirty.data.update((ino, i) for i in indices)
        if deleted:
            self._conn.execute("DELETE FROM present WHERE ino=?", (ino,))
        else:
            self.set_present(ino, sorted(indices))

    def all_chunks(self) -> set[str]:
        return {r[0] for r in self._conn.execute("SELECT DISTINCT digest FROM chunks")}

    # Sync.
    @property
    def dirty_data_count(self) -> int:
        return len(self._dirty.data)

    def has_changes(self) -> bool:
        d = self._dirty
        return bool(d.inodes or d.dirents or d.data)

    def cut(self) -> MetaCut:
        """The changed rows as they are now; the dirty sets start over."""
        dirty, self._dirty = self._dirty, _Dirty()
        seg = Segment(meta=dict(self.counters))
        for ino in dirty.inodes:
            node = self.inode(ino)
            seg.inodes[ino] = None if node is None else node.row()
        for dir_ino, name in dirty.dirents:
            seg.dirents[(dir_ino, name_str(name))] = self.dirent(dir_ino, name)
        return MetaCut(seg, dirty.data, dirty.inodes, dirty.dirents)

    def redirty(self, cut: MetaCut) -> None:
        """A sync that failed: its keys are logged by the next one instead."""
        self._dirty.inodes |= cut.inode_keys
        self._dirty.dirents |= cut.dirent_keys
        self._dirty.data |= cut.data

    def apply_chunks(self, results: dict[ChunkKey, str | None]) -> None:
        """The synced digests become the map (the rows a later change dirtied sync again)."""
        with self._conn:
            self._conn.executemany("DELETE FROM chunks WHERE ino=? AND idx=?",
                                   [k for k, v in results.items() if v is None])
            self._conn.executemany("INSERT OR REPLACE INTO chunks VALUES(?,?,?)",
                                   [(*k, v) for k, v in results.items() if v is not None])

    def load(self, state: Segment) -> None:
        """Fills an empty database with a backend state (nothing is present locally yet)."""
        with self._conn:
            self._conn.executemany(
                "INSERT INTO inodes VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
                (astuple(Inode.from_row(ino, row)) for ino, row in state.inodes.items()
                 if row is not None))
            self._conn.executemany(
                "INSERT INTO dirents VALUES(?,?,?,?)",
                ((d, name_bytes(n), v[0], v[1]) for (d, n), v in state.dirents.items()
                 if v is not None))
            self._conn.executemany(
                "INSERT INTO chunks VALUES(?,?,?)",
                ((*k, v) for k, v in state.chunks.items() if v is not None))
            self._conn.executemany("INSERT OR REPLACE INTO meta VALUES(?, ?)",
                                   ((k, state.meta.get(k, 0)) for k in COUNTERS))
        self._load_counters()

    def dump(self) -> Segment:
        """Every row (a new volume's first checkpoint)."""
        seg = Segment(meta=dict(self.counters))
        for r in self._conn.execute("SELECT * FROM inodes"):
            seg.inodes[r[0]] = Inode(*r).row()
        for d, n, ino, cookie in self._conn.execute("SELECT * FROM dirents"):
            seg.dirents[(d, name_str(n))] = (ino, cookie)
        for ino, idx, digest in self._conn.execute("SELECT * FROM chunks"):
            seg.chunks[(ino, idx)] = digest
        return seg


def root_inode(now_ns: int) -> Inode:
    return Inode(ROOT_INO, Kind.DIRECTORY.value, ROOT_MODE, 2, 0, 0, 0, now_ns, now_ns, now_ns,
                 ROOT_INO, None)

