"""The filesystem backend: atomic puts, listing, key validation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aenv_common.errors import InvalidArgument, NotFound
from aenv_snapstore.backends.fs import FsBackend


async def test_put_get_list_delete(tmp_path: Path) -> None:
    backend = FsBackend(tmp_path)
    await backend.put("chunks/sha256/ab/abcd", b"one")
    await backend.put("manifests/s1", b"two")
    await backend.put("chunks/sha256/ab/abcd", b"three")  # replaced atomically

    assert await backend.get("chunks/sha256/ab/abcd") == b"three"
    assert await backend.has("manifests/s1")
    listed = [info async for info in backend.list("chunks/")]
    assert [(i.key, i.size) for i in listed] == [("chunks/sha256/ab/abcd", 5)]
    assert [i.key async for i in backend.list("manifests/s")] == ["manifests/s1"]
    # No temp file is left next to the objects.
    assert os.listdir(tmp_path / "chunks/sha256/ab") == ["abcd"]

    await backend.delete("manifests/s1")
    await backend.delete("manifests/s1")  # absent: no error
    assert not await backend.has("manifests/s1")
    with pytest.raises(NotFound):
        await backend.get("manifests/s1")


@pytest.mark.parametrize("key", ["../x", "a//b", "/abs", "a/./b", "a/.hidden", ""])
async def test_keys_cannot_escape_the_root(tmp_path: Path, key: str) -> None:
    backend = FsBackend(tmp_path / "root")
    with pytest.raises(InvalidArgument):
        await backend.put(key, b"x")
    assert not (tmp_path / "x").exists()
