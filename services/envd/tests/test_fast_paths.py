"""The throughput paths: hand-encoded output frames, coalescing channel, zero-copy multipart."""

from __future__ import annotations

import asyncio
import json
import os
import random
import struct

import pytest

from aenv_envd import output
from aenv_envd.channel import EventChannel
from aenv_envd.connect import Codec
from aenv_envd.errors import EnvdError
from aenv_envd.multipart import MultipartParser, PartData, PartEnd
from aenv_envd.output import OutputChunk
from envd.process import process_pb2 as pb


@pytest.mark.parametrize("openssl", [True, False])
@pytest.mark.parametrize("size", [0, 1, 2, 3, 127, 128, 16_383, 16_384, 300_001])
def test_output_chunk_encodes_like_protobuf(
    openssl: bool, size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not openssl:
        monkeypatch.setattr(output, "_openssl_base64", lambda: None)
    data = os.urandom(size)
    for kind in ("stdout", "stderr", "pty"):
        chunk = OutputChunk(kind, data[: size // 3])
        chunk.absorb(data[size // 3 : size // 2])
        chunk.absorb(data[size // 2 :])
        expected = pb.StartResponse(event=pb.ProcessEvent(data=pb.ProcessEvent.DataEvent()))
        setattr(expected.event.data, kind, data)
        for binary in (False, True):
            codec = Codec(binary)
            frame = bytes(codec.frame(chunk))
            flags, length = struct.unpack(">BI", frame[:5])
            assert flags == 0 and length == len(frame) - 5
            if binary:
                assert pb.StartResponse.FromString(frame[5:]) == expected
                assert pb.ConnectResponse.FromString(frame[5:]).event == expected.event
            else:
                assert json.loads(frame[5:]) == json.loads(codec.encode(expected))


def test_channel_coalesces_and_bounds_bytes() -> None:
    async def scenario() -> None:
        channel: EventChannel[OutputChunk] = EventChannel(max_bytes=10)
        channel.put_nowait(OutputChunk("stdout", b"abc"), 3)
        tail = channel.tail()
        assert tail is not None
        tail.absorb(b"defgh")
        channel.grew(5)
        await asyncio.wait_for(channel.wait_room(), 1)  # 8 < 10 bytes queued
        channel.grew(2)  # (pretend) 10 bytes: full
        blocked = asyncio.ensure_future(channel.wait_room())
        await asyncio.sleep(0.01)
        assert not blocked.done()
        taken = await channel.get()
        assert taken is not None and taken.data == b"abcdefgh"
        await asyncio.wait_for(blocked, 1)
        assert channel.tail() is None

    asyncio.run(scenario())


def _parse(boundary: str, pieces: list[bytes]) -> object:
    parser = MultipartParser(boundary)
    parts: list[bytes] = []
    current = b""
    try:
        for piece in pieces:
            for event in parser.feed(piece):
                if isinstance(event, PartData):
                    current += event.data
                elif isinstance(event, PartEnd):
                    parts.append(current)
                    current = b""
    except EnvdError:
        return "error"
    return parser.done, parts


def test_multipart_chunk_scan_matches_byte_by_byte() -> None:
    """Bodies full of near-delimiters, split anywhere: the in-chunk scan of large pieces finds
    exactly what the byte-at-a-time (buffered) path finds."""
    rng = random.Random(7)
    alphabet = [b"\r", b"\n", b"-", b"B", b"N", b"D", b"x", b"\r\n--BN", b"\r\n--BND--"]
    for _ in range(800):
        body = b"preamble\r\n"
        for _ in range(rng.randint(1, 3)):
            content = b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
            body += b'--BND\r\nContent-Disposition: form-data; name="file"\r\n\r\n'
            body += content + b"\r\n"
        body += b"--BND--\r\n"
        expected = _parse("BND", [body[i : i + 1] for i in range(len(body))])
        assert _parse("BND", [body]) == expected
        cuts = sorted(rng.sample(range(1, len(body)), k=rng.randint(1, 10)))
        pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
        assert _parse("BND", pieces) == expected
