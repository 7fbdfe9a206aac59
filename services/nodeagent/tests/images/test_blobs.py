"""The layer cache: verified, complete, fetched once however many builds ask at once."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from aenv_nodeagent.images.blobs import BlobCache, digest_hex
from aenv_nodeagent.images.errors import LayerCorrupt, UnsupportedImage

from .layers import sha256

DATA = os.urandom(300_000)
DIGEST = sha256(DATA)


def chunks_of(data: bytes, calls: list[int]) -> Callable[[], AsyncIterator[bytes]]:
    async def chunks() -> AsyncIterator[bytes]:
        calls.append(1)
        for i in range(0, len(data), 65536):
            await asyncio.sleep(0.01)
            yield data[i:i + 65536]

    return chunks


async def test_fetches_once_under_concurrency_and_then_hits(tmp_path: Path) -> None:
    cache, calls = BlobCache(tmp_path), list[int]()
    results = await asyncio.gather(*(cache.fetch(DIGEST, len(DATA), chunks_of(DATA, calls))
                                     for _ in range(4)))
    assert sorted(results) == [False, False, False, True] and len(calls) == 1
    assert cache.path(DIGEST).read_bytes() == DATA
    assert await cache.fetch(DIGEST, len(DATA), chunks_of(DATA, calls)) is False
    assert len(calls) == 1
    assert os.listdir(tmp_path / "tmp") == []


@pytest.mark.parametrize(("data", "size", "match"), [
    (b"x" + DATA[1:], len(DATA), "hashes to"),
    (DATA[:-1], len(DATA), "expected"),
    (DATA + b"more", len(DATA), "larger than"),
])
async def test_a_blob_that_does_not_match_is_not_kept(
    tmp_path: Path, data: bytes, size: int, match: str
) -> None:
    cache = BlobCache(tmp_path)
    with pytest.raises(LayerCorrupt, match=match):
        await cache.fetch(DIGEST, size, chunks_of(data, []))
    assert not cache.has(DIGEST)
    assert os.listdir(tmp_path / "tmp") == [], "no partial file left"


async def test_discard_forgets_a_blob(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path)
    await cache.fetch(DIGEST, len(DATA), chunks_of(DATA, []))
    cache.discard(DIGEST)
    assert not cache.has(DIGEST)


@pytest.mark.parametrize("digest", ["sha512:" + "0" * 128, "sha256:../../etc", "sha256:ABC"])
def test_only_sha256_digests_become_file_names(digest: str) -> None:
    with pytest.raises(UnsupportedImage):
        digest_hex(digest)
