"""Property-based fuzzing of envd's parsers and its files API (the edges fuzzed):
Connect envelopes, multipart bodies, header parameters, Basic user names and path arguments.
Whatever arrives, envd answers a typed error (EnvdError, an HTTP 4xx), never a crash; what can
be written can be read back the same (round trips); a path lands where envd says it does.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from aenv_envd.app import build_app
from aenv_envd.config import EnvdConfig
from aenv_envd.connect import FLAG_END_STREAM, EnvelopeReader, encode_envelope
from aenv_envd.errors import EnvdError
from aenv_envd.multipart import MultipartParser, PartData, PartEnd, PartStart, parse_header_params
from aenv_envd.users import User, resolve_path, username_from_authorization
from envd.filesystem import filesystem_pb2 as fs_pb

FUZZ = settings(max_examples=150, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
USER = User("user", 1000, 1000, "/home/user", (1000,))


def _splits(data: bytes, cuts: list[int]) -> list[bytes]:
    """`data` cut at the given offsets (as a body arrives in arbitrary chunks)."""
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


# ----- Connect envelopes -----------------------------------------------------------------------

envelopes = st.lists(st.tuples(st.sampled_from([0, FLAG_END_STREAM]),
                               st.binary(max_size=300)), max_size=8)


@FUZZ
@given(envelopes, st.lists(st.integers(min_value=0), max_size=12))
def test_envelopes_round_trip_whatever_the_chunking(
    sent: list[tuple[int, bytes]], cuts: list[int]
) -> None:
    wire = b"".join(encode_envelope(flags, payload) for flags, payload in sent)
    reader = EnvelopeReader()
    got = [envelope for chunk in _splits(wire, cuts) for envelope in reader.feed(chunk)]
    assert got == sent
    assert not reader.has_partial


@FUZZ
@given(st.binary(max_size=2000), st.lists(st.integers(min_value=0), max_size=12))
def test_envelope_reader_takes_any_bytes(wire: bytes, cuts: list[int]) -> None:
    reader = EnvelopeReader()
    try:
        for chunk in _splits(wire, cuts):
            for _, payload in reader.feed(chunk):
                assert len(payload) <= len(wire)
    except EnvdError as err:
        assert err.code in ("resource_exhausted", "internal")


def test_an_oversized_envelope_is_refused_before_it_is_buffered() -> None:
    reader = EnvelopeReader()
    with pytest.raises(EnvdError) as refused:
        reader.feed(struct.pack(">BI", 0, 2**32 - 1))
    assert refused.value.code == "resource_exhausted"


# ----- multipart -------------------------------------------------------------------------------

BOUNDARY = "fuzzboundary7MA4YWxk"
filenames = st.text(st.characters(exclude_characters='"\\\r\n', exclude_categories=["Cs"]),
                    max_size=40)
parts = st.lists(st.tuples(filenames, st.binary(max_size=400)), min_size=1, max_size=4)


def _multipart(files: list[tuple[str, bytes]]) -> bytes:
    body = b""
    for name, data in files:
        body += (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; "
                 f"filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
                 ).encode() + data + b"\r\n"
    return body + f"--{BOUNDARY}--\r\n".encode()


def _parse(parser: MultipartParser, chunks: list[bytes]) -> list[tuple[str, bytes]]:
    got: list[tuple[str, bytes]] = []
    for chunk in chunks:
        for event in parser.feed(chunk):
            if isinstance(event, PartStart):
                _, params = parse_header_params(event.headers["content-disposition"])
                got.append((params["filename"], b""))
            elif isinstance(event, PartData):
                got[-1] = (got[-1][0], got[-1][1] + bytes(event.data))
            else:
                assert isinstance(event, PartEnd)
    return got


@FUZZ
@given(parts, st.lists(st.integers(min_value=0), max_size=16))
def test_multipart_round_trips_whatever_the_chunking(
    files: list[tuple[str, bytes]], cuts: list[int]
) -> None:
    parser = MultipartParser(BOUNDARY)
    assert _parse(parser, _splits(_multipart(files), cuts)) == files
    assert parser.done


@FUZZ
@given(st.binary(max_size=3000), st.lists(st.integers(min_value=0), max_size=12))
def test_multipart_parser_takes_any_bytes(body: bytes, cuts: list[int]) -> None:
    parser = MultipartParser(BOUNDARY)
    try:
        for chunk in _splits(f"--{BOUNDARY}\r\n".encode() + body, cuts):
            parser.feed(chunk)
    except EnvdError as err:
        assert err.code == "invalid_argument"


@FUZZ
@given(st.text(max_size=200))
def test_header_parameters_take_any_text(value: str) -> None:
    media, params = parse_header_params(value)
    assert media == media.strip().lower()
    assert all(key == key.lower() for key in params)


@FUZZ
@given(filenames)
def test_a_quoted_filename_round_trips(name: str) -> None:
    _, params = parse_header_params(f'form-data; name="file"; filename="{name}"')
    assert params == {"name": "file", "filename": name}


# ----- users and paths -------------------------------------------------------------------------


@FUZZ
@given(st.text(max_size=120))
def test_authorization_takes_any_header(header: str) -> None:
    try:
        name = username_from_authorization(header)
    except EnvdError as err:
        assert err.code == "unauthenticated"
        return
    assert name is None or (name and ":" not in name)


@FUZZ
@given(st.text(st.characters(exclude_characters=":", exclude_categories=["Cs"]),
               min_size=1, max_size=40))
def test_a_basic_user_name_round_trips(name: str) -> None:
    token = base64.b64encode(f"{name}:".encode()).decode()
    assert username_from_authorization(f"Basic {token}") == name


segments = st.lists(st.sampled_from(["..", ".", "", "a", "b c", "~", "x..y", "..."]) |
                    st.text(st.characters(exclude_characters="/\x00", exclude_categories=["Cs"]),
                            max_size=8), max_size=8)


@FUZZ
@given(st.sampled_from(["", "/", "~/", "./"]), segments)
def test_a_resolved_path_is_absolute_and_normal(prefix: str, parts: list[str]) -> None:
    path = prefix + "/".join(parts)
    try:
        resolved = resolve_path(path, USER, "/work")
    except EnvdError as err:  # `~name` forms only
        assert err.code == "invalid_argument" and path.startswith("~")
        return
    assert os.path.isabs(resolved)
    assert resolved == os.path.normpath(resolved) or resolved.startswith("//")
    assert ".." not in resolved.split("/")


# ----- the files API, on a temporary directory -------------------------------------------------


@pytest.fixture(scope="module")
def files_api() -> Iterator[tuple[TestClient, Path]]:
    app = build_app(EnvdConfig(sync_clock=False, reseed_rng=False))
    with tempfile.TemporaryDirectory(prefix="envd-fuzz-") as root, TestClient(app) as client:
        yield client, Path(root)


@FUZZ
@given(st.text(max_size=60), st.sampled_from(["root", "", "nosuchuser", "../root", "ro\x00ot"]))
def test_downloads_answer_typed_errors_for_any_path(
    files_api: tuple[TestClient, Path], path: str, username: str
) -> None:
    client, root = files_api
    # Inside the test's directory: the point is the parsing, not reading the host's files.
    response = client.get("/files", params={"path": f"{root}/{path}", "username": username})
    assert response.status_code in (200, 400, 401, 403, 404, 416), response.text
    if response.status_code != 200:
        assert response.json()["message"]


@FUZZ
@given(segments, st.binary(max_size=64))
def test_an_upload_lands_where_envd_says(
    files_api: tuple[TestClient, Path], parts: list[str], data: bytes
) -> None:
    client, root = files_api
    # Deep enough that no run of `..` climbs out of the temporary directory.
    base = root / "d1" / "d2" / "d3" / "d4" / "d5" / "d6" / "d7" / "d8" / "d9"
    requested = f"{base}/" + "/".join([*parts, "f"])
    response = client.post("/files", params={"path": requested, "username": "root"},
                           files={"file": ("f", data)})
    if response.status_code != 200:
        assert response.status_code == 400, response.text
        return
    [written] = response.json()
    assert written["path"] == os.path.normpath(requested)
    assert Path(written["path"]).read_bytes() == data
    assert Path(written["path"]).resolve().is_relative_to(root.resolve())


@pytest.mark.parametrize("path", ["a\x00b", "/tmp/\x00", "\x00"])
def test_a_nul_byte_in_a_path_is_a_bad_request(
    files_api: tuple[TestClient, Path], path: str
) -> None:
    client, _ = files_api
    got = client.get("/files", params={"path": path, "username": "root"})
    put = client.post("/files", params={"path": path, "username": "root"},
                      files={"file": ("f", b"x")})
    assert (got.status_code, put.status_code) == (400, 400), (got.text, put.text)


ROOT_AUTH = {"Authorization": "Basic " + base64.b64encode(b"root:").decode()}
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                               max_size=3), max_leaves=8)


@FUZZ
@given(st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()),
       st.sampled_from(["application/json", "application/proto", "text/plain"]))
def test_a_unary_rpc_answers_typed_errors_for_any_body(
    files_api: tuple[TestClient, Path], body: bytes, content_type: str
) -> None:
    """Stat only: it reads. Any body may decode to any path (an empty one is the caller's
    home), so the RPCs that change the filesystem get only paths inside the test's directory
    (below)."""
    client, _ = files_api
    response = client.post("/filesystem.Filesystem/Stat", content=body,
                           headers={**ROOT_AUTH, "Content-Type": content_type})
    assert response.status_code < 500, response.text


@FUZZ
@given(st.sampled_from(["MakeDir", "Remove", "Stat", "ListDir"]), segments,
       st.sampled_from(["application/json", "application/proto"]))
def test_filesystem_rpcs_answer_typed_errors_for_any_path(
    files_api: tuple[TestClient, Path], method: str, parts: list[str], content_type: str
) -> None:
    client, root = files_api
    base = root / "r1" / "r2" / "r3" / "r4" / "r5" / "r6" / "r7" / "r8" / "r9"
    path = f"{base}/" + "/".join([*parts, "x"])
    assert Path(os.path.normpath(path)).is_relative_to(root)
    if content_type == "application/json":
        body = json.dumps({"path": path}).encode()
    else:
        body = fs_pb.StatRequest(path=path).SerializeToString()  # path is field 1 of all four
    response = client.post(f"/filesystem.Filesystem/{method}", content=body,
                           headers={**ROOT_AUTH, "Content-Type": content_type})
    assert response.status_code < 500, response.text


@FUZZ
@given(st.binary(max_size=300))
def test_a_streaming_rpc_answers_typed_errors_for_any_body(
    files_api: tuple[TestClient, Path], body: bytes
) -> None:
    """Connect (to a process envd started: none here), never Start: these run on the host."""
    client, _ = files_api
    response = client.post("/process.Process/Connect", content=body,
                           headers={**ROOT_AUTH, "Content-Type": "application/connect+json"})
    # A Connect stream answers 200 and carries its error in the end-of-stream message.
    assert response.status_code in (200, 400, 401, 404, 415), response.text
    if response.status_code == 200:
        reader = EnvelopeReader()
        frames = reader.feed(response.content)
        assert frames and frames[-1][0] & FLAG_END_STREAM
