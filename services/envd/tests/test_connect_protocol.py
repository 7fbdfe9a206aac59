"""Connect codec and wire shape: envelopes, codecs, error statuses, stream framing."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from aenv_envd.app import build_app
from aenv_envd.config import EnvdConfig
from aenv_envd.connect import (
    FLAG_END_STREAM,
    Codec,
    EnvelopeReader,
    encode_envelope,
    end_stream_payload,
)
from aenv_envd.errors import UNAUTHORIZED_MESSAGE, EnvdError
from aenv_envd.state import SandboxState
from envd.filesystem import filesystem_pb2 as fs_pb
from envd.process import process_pb2 as pb


def envelopes(body: bytes) -> list[tuple[int, bytes]]:
    reader = EnvelopeReader()
    parsed = reader.feed(body)
    assert not reader.has_partial
    return parsed


def test_envelope_roundtrip_split_anywhere() -> None:
    data = encode_envelope(0, b'{"a":1}') + encode_envelope(FLAG_END_STREAM, b"{}")
    assert data[:5] == b"\x00\x00\x00\x00\x07"
    reader = EnvelopeReader()
    got = [env for byte in data for env in reader.feed(bytes([byte]))]
    assert got == [(0, b'{"a":1}'), (FLAG_END_STREAM, b"{}")]


def test_envelope_rejects_huge_and_compressed() -> None:
    with pytest.raises(EnvdError) as info:
        EnvelopeReader().feed(struct.pack(">BI", 0, 1 << 30))
    assert info.value.code == "resource_exhausted"
    with pytest.raises(EnvdError):
        EnvelopeReader().feed(encode_envelope(1, b"x"))


def test_end_stream_payloads() -> None:
    assert end_stream_payload(None) == b"{}"
    error = json.loads(end_stream_payload(EnvdError("not_found", "process with pid 7 not found")))
    assert error == {"error": {"code": "not_found", "message": "process with pid 7 not found"}}


def test_json_codec_proto3_rules() -> None:
    codec = Codec(binary=False)
    entry = fs_pb.EntryInfo(name="a", size=5, type=fs_pb.FILE_TYPE_FILE)
    entry.modified_time.FromSeconds(1767225600)
    assert json.loads(codec.encode(entry)) == {
        "name": "a",
        "size": "5",
        "type": "FILE_TYPE_FILE",
        "modifiedTime": "2026-01-01T00:00:00Z",
    }
    event = pb.ProcessEvent(data=pb.ProcessEvent.DataEvent(stdout=b"hi"))
    assert codec.encode(event) == b'{"data":{"stdout":"aGk="}}'
    end = pb.ProcessEvent(end=pb.ProcessEvent.EndEvent(exit_code=-1, status="signal: killed"))
    assert json.loads(codec.encode(end)) == {"end": {"exitCode": -1, "status": "signal: killed"}}
    # Parsers take snake_case, integer enums and unknown fields.
    parsed = codec.decode(
        b'{"process":{"pid":3},"signal":9,"unknownField":true}', pb.SendSignalRequest
    )
    assert parsed.process.pid == 3 and parsed.signal == pb.SIGNAL_SIGKILL
    stdin = codec.decode(b'{"start":{"process":{"pid":1}},"stdin":false}', pb.StartRequest)
    assert stdin.HasField("stdin") and stdin.stdin is False
    with pytest.raises(EnvdError) as info:
        codec.decode(b"{not json", pb.ListRequest)
    assert info.value.code == "invalid_argument"


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(build_app(EnvdConfig(), SandboxState())) as test_client:
        yield test_client


CONNECT_HEADERS = {"connect-protocol-version": "1"}


def test_unary_json_and_proto(client: TestClient) -> None:
    response = client.post(
        "/process.Process/List", content=b"{}", headers={"content-type": "application/json"}
    )
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    assert response.json() == {}  # nothing running: empty message
    binary = client.post(
        "/process.Process/List", content=b"", headers={"content-type": "application/proto"}
    )
    assert binary.headers["content-type"] == "application/proto"
    pb.ListResponse.FromString(binary.content)


def test_unary_error_status_and_body(client: TestClient) -> None:
    response = client.post(
        "/process.Process/SendSignal",
        content=b'{"process":{"pid":999999},"signal":"SIGNAL_SIGKILL"}',
        headers={"content-type": "application/json", **CONNECT_HEADERS},
    )
    assert response.status_code == 404
    assert response.json() == {"code": "not_found", "message": "process with pid 999999 not found"}
    bad_user = client.post(
        "/process.Process/List",
        content=b"{}",
        headers={"content-type": "application/json", "authorization": "Basic bm9zdWNodXNlcjo="},
    )
    assert bad_user.status_code == 401 and bad_user.json()["code"] == "unauthenticated"
    assert client.post("/process.Process/List", content=b"{}").status_code == 415


def test_server_stream_error_is_end_stream(client: TestClient) -> None:
    body = encode_envelope(0, b'{"process":{"pid":999999}}')
    response = client.post(
        "/process.Process/Connect",
        content=body,
        headers={"content-type": "application/connect+json", **CONNECT_HEADERS},
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/connect+json"
    [(flags, payload)] = envelopes(response.content)
    assert flags == FLAG_END_STREAM
    assert json.loads(payload)["error"]["code"] == "not_found"


def test_start_stream_shape(client: TestClient) -> None:
    request = b'{"process":{"cmd":"/bin/sh","args":["-c","printf hi; exit 3"]},"stdin":false}'
    response = client.post(
        "/process.Process/Start",
        content=encode_envelope(0, request),
        headers={"content-type": "application/connect+json", "authorization": "Basic cm9vdDo="},
    )
    assert response.headers["content-type"] == "application/connect+json"
    frames = envelopes(response.content)
    messages = [json.loads(p) for f, p in frames[:-1]]
    assert "start" in messages[0]["event"] and messages[0]["event"]["start"]["pid"] > 0
    assert {"event": {"data": {"stdout": "aGk="}}} in messages
    assert messages[-1]["event"]["end"] == {
        "exitCode": 3,
        "exited": True,
        "status": "exit status 3",
        "error": "exit status 3",
    }
    assert frames[-1] == (FLAG_END_STREAM, b"{}")


def test_start_bad_cwd_is_invalid_argument(client: TestClient) -> None:
    request = b'{"process":{"cmd":"/bin/true","cwd":"/no/such/dir"}}'
    response = client.post(
        "/process.Process/Start",
        content=encode_envelope(0, request),
        headers={"content-type": "application/connect+json", "authorization": "Basic cm9vdDo="},
    )
    [(flags, payload)] = envelopes(response.content)
    assert flags == FLAG_END_STREAM
    assert json.loads(payload) == {
        "error": {"code": "invalid_argument", "message": "cwd '/no/such/dir' does not exist"}
    }


def test_stream_input_answers_exactly_one_message(client: TestClient) -> None:
    # Unknown pid: a single end-stream error, no data message.
    body = encode_envelope(0, b'{"start":{"process":{"pid":999999}}}')
    response = client.post(
        "/process.Process/StreamInput",
        content=body,
        headers={"content-type": "application/connect+json"},
    )
    [(flags, payload)] = envelopes(response.content)
    assert flags == FLAG_END_STREAM and b"not_found" in payload
    # Only keepalives: one empty message and a clean end.
    response = client.post(
        "/process.Process/StreamInput",
        content=encode_envelope(0, b'{"keepalive":{}}'),
        headers={"content-type": "application/connect+json"},
    )
    assert envelopes(response.content) == [(0, b"{}"), (FLAG_END_STREAM, b"{}")]


def test_access_token_enforced() -> None:
    state = SandboxState(access_token="secret")
    with TestClient(build_app(EnvdConfig(), state)) as client:
        assert client.get("/health").status_code == 204
        denied = client.post(
            "/process.Process/List", content=b"{}", headers={"content-type": "application/json"}
        )
        assert denied.status_code == 401
        assert denied.json() == {"code": 401, "message": UNAUTHORIZED_MESSAGE}
        assert client.get("/files", params={"path": "/etc/hostname"}).status_code == 401
        allowed = client.post(
            "/process.Process/List",
            content=b"{}",
            headers={"content-type": "application/json", "x-access-token": "secret"},
        )
        assert allowed.status_code == 200
        assert client.get("/envs", headers={"x-access-token": "secret"}).json() == {}
        metrics = client.get("/metrics", headers={"x-access-token": "secret"}).json()
        assert metrics["mem_total"] > 0 and metrics["disk_total"] > 0 and metrics["cpu_count"] >= 1


def test_init_replaces_the_token_and_adds_env_vars() -> None:
    state = SandboxState()
    config = EnvdConfig(sync_clock=False, reseed_rng=False)
    with TestClient(build_app(config, state)) as client:
        first = client.post("/init", json={"accessToken": "t1", "envVars": {"A": "1"}})
        assert first.status_code == 204 and first.headers["x-envd-version"]
        assert client.post("/init", json={"accessToken": "t2"}).status_code == 401
        again = client.post(
            "/init",
            json={
                "accessToken": "t2",
                "envVars": {"B": "2"},
                "timestamp": "2026-01-01T00:00:00.123456789Z",
                "entropy": "AAEC",
                "defaultUser": "nobody",
                "defaultWorkdir": "/tmp",
            },
            headers={"x-access-token": "t1"},
        )
        assert again.status_code == 204
    # As upstream's: variables are added (a template's stay under the sandbox's own).
    assert state.access_token == "t2" and state.env_vars == {"A": "1", "B": "2"}
    assert state.default_user == "nobody" and state.default_workdir == "/tmp"


def test_each_init_replaces_its_marker_after_the_state(tmp_path: Path) -> None:
    marker = tmp_path / "run" / "envd-init"
    config = EnvdConfig(sync_clock=False, reseed_rng=False, init_marker=str(marker))
    with TestClient(build_app(config, SandboxState())) as client:
        assert client.post("/init", json={"accessToken": "t1"}).status_code == 204
        first = marker.stat()
        assert first.st_mode & 0o777 == 0o644 and marker.read_bytes() == b""
        headers = {"x-access-token": "t1"}
        again = client.post("/init", json={"envVars": {"A": "1"}}, headers=headers)
        assert again.status_code == 204
        assert marker.stat().st_ino != first.st_ino  # a new file: readers see the change
        assert client.get("/envs", headers=headers).json() == {"A": "1"}
        assert list(marker.parent.iterdir()) == [marker]  # nothing staged left beside it


def test_sync_flushes_for_the_token_holder_only(monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[bool] = []
    monkeypatch.setattr("aenv_envd.control_http.os.sync", lambda: synced.append(True))
    state = SandboxState()
    with TestClient(build_app(EnvdConfig(sync_clock=False, reseed_rng=False), state)) as client:
        assert client.post("/init", json={"accessToken": "t1"}).status_code == 204
        assert client.post("/sync").status_code == 401
        assert synced == []
        assert client.post("/sync", headers={"x-access-token": "t1"}).status_code == 204
    assert synced == [True]


def test_downloads_are_gzipped_only_when_that_shrinks_them(tmp_path: Path) -> None:
    text, noise = tmp_path / "text.txt", tmp_path / "noise.bin"
    text.write_bytes(b"hello envd\n" * 20000)
    noise.write_bytes(os.urandom(200_000))
    app = build_app(EnvdConfig(sync_clock=False, reseed_rng=False), SandboxState())
    with TestClient(app) as client:
        for path, encoding in ((text, "gzip"), (noise, None)):
            got = client.get("/files", params={"path": str(path), "username": "root"},
                             headers={"accept-encoding": "gzip"})
            assert got.status_code == 200
            assert got.headers.get("content-encoding") == encoding
            assert got.content == path.read_bytes()  # httpx decodes gzip
        plain = client.get("/files", params={"path": str(text), "username": "root"},
                           headers={"accept-encoding": "identity"})
        assert "content-encoding" not in plain.headers
        assert plain.headers["content-length"] == str(text.stat().st_size)
