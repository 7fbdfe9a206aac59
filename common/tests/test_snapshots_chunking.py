"""chunk_file and the chunk codec."""

from __future__ import annotations

from pathlib import Path

import pytest

from aenv_common.errors import InvalidArgument
from aenv_common.snapshots import ZERO_CHUNK, chunk_file
from aenv_common.snapshots.codec import CorruptChunk, compress, decode_chunk, digest_of


def test_chunks_cover_the_file_in_order(tmp_path: Path) -> None:
    path = tmp_path / "f"
    data = bytes(range(256)) * 40 + b"tail"  # 10244 bytes
    path.write_bytes(data)

    chunks = list(chunk_file(path, 4096))

    assert [d for d, _ in chunks] == [digest_of(data[i : i + 4096]) for i in (0, 4096, 8192)]
    assert b"".join(c for _, c in chunks) == data


def test_zero_slices_become_markers_whether_holes_or_written(tmp_path: Path) -> None:
    path = tmp_path / "f"
    with open(path, "wb") as f:
        f.truncate(5 * 4096 + 10)
        f.seek(4096)
        f.write(bytes(4096))  # written zeros
        f.seek(3 * 4096)
        f.write(b"x")

    digests = [d for d, _ in chunk_file(path, 4096)]

    assert digests[:3] == [ZERO_CHUNK] * 3
    assert digests[3] == digest_of(b"x" + bytes(4095))
    assert digests[4:] == [ZERO_CHUNK] * 2  # the short tail too


def test_empty_file_has_no_chunks(tmp_path: Path) -> None:
    (tmp_path / "e").write_bytes(b"")
    assert list(chunk_file(tmp_path / "e", 4096)) == []


@pytest.mark.parametrize("size", [0, 3 * 1024 * 1024])
def test_chunk_size_is_bounded(tmp_path: Path, size: int) -> None:
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(InvalidArgument):
        list(chunk_file(tmp_path / "f", size))


def test_decode_verifies_digest_and_size() -> None:
    data = b"hello" * 100
    assert decode_chunk(digest_of(data), compress(data), len(data)) == data
    with pytest.raises(CorruptChunk, match="hashes to"):
        decode_chunk(digest_of(b"other"), compress(data), len(data))
    with pytest.raises(CorruptChunk, match="expected"):
        decode_chunk(digest_of(data), compress(data), len(data) + 1)
    with pytest.raises(CorruptChunk, match="zstd"):
        decode_chunk(digest_of(data), b"not zstd", len(data))
