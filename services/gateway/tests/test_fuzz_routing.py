"""Property-based fuzzing of how the gateway finds a request's sandbox (the edges
fuzzed): the Host `<port>-<id>.<domain>`, the `E2b-Sandbox-Id`/`E2b-Sandbox-Port` headers and
the numbers of query strings. Any text gives a target, None or a typed error, never a crash;
a target written out parses back to itself.
"""

from __future__ import annotations

import string

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aenv_common.errors import InvalidArgument
from aenv_common.ids import SANDBOX_ID_LENGTH
from aenv_common.sandbox_routing import SandboxTarget, parse_port, target_from_headers
from aenv_gateway.rest.dispatch import target_from_host

from .conftest import API_KEY, Stack

FUZZ = settings(max_examples=300, derandomize=True, deadline=None, database=None)
DOMAIN = "aenv.test"
# Header values travel as latin-1: every code point below 256 can arrive.
latin1 = st.text(st.characters(max_codepoint=255), max_size=40)
# Text near the shapes parsed: digits (also ones only Unicode calls digits), dashes, dots.
shaped = st.text(st.sampled_from("0123456789²³¹٣-.:az ") | st.characters(max_codepoint=255),
                 max_size=30)
sandbox_ids = st.text(string.ascii_lowercase + string.digits, min_size=SANDBOX_ID_LENGTH,
                      max_size=SANDBOX_ID_LENGTH)
ports = st.integers(min_value=1, max_value=65535)


@FUZZ
@given(sandbox_ids, ports, st.sampled_from(["", ":443", ":3000"]), st.booleans())
def test_a_sandbox_host_round_trips(sandbox_id: str, port: int, suffix: str, upper: bool) -> None:
    host = f"{port}-{sandbox_id}.{DOMAIN}{suffix}"
    assert target_from_host(host.upper() if upper else host, DOMAIN) == SandboxTarget(
        sandbox_id, port)


@FUZZ
@given(shaped, st.sampled_from(["", f".{DOMAIN}", f".{DOMAIN}:80", "-x." + DOMAIN,
                                "-" + "a" * 20 + "." + DOMAIN]))
def test_any_host_is_a_target_or_none(prefix: str, suffix: str) -> None:
    target = target_from_host(prefix + suffix, DOMAIN)
    assert target is None or 0 < target.port < 65536


@FUZZ
@given(st.one_of(st.none(), latin1), st.one_of(st.none(), shaped))
def test_any_routing_headers_are_a_target_none_or_refused(
    sandbox_id: str | None, port: str | None
) -> None:
    headers = {k: v for k, v in (("e2b-sandbox-id", sandbox_id), ("e2b-sandbox-port", port))
               if v is not None}
    try:
        target = target_from_headers(headers)
    except InvalidArgument:
        assert port not in (None, "")
        return
    assert (target is None) == (sandbox_id is None)


port_texts = st.text(st.sampled_from("0123456789²³¹٣ +-"), min_size=1, max_size=7)


@FUZZ
@given(port_texts, sandbox_ids)
def test_a_port_of_any_digits_is_a_port_or_refused(port: str, sandbox_id: str) -> None:
    target = target_from_host(f"{port}-{sandbox_id}.{DOMAIN}", DOMAIN)
    assert target is None or str(target.port) == port.lstrip("0")
    try:
        assert str(parse_port(port)) == port.lstrip("0")
    except InvalidArgument:
        pass


@FUZZ
@given(ports)
def test_a_port_header_round_trips(port: int) -> None:
    assert parse_port(str(port)) == port


# Digits Python's isdigit() takes but int() does not (superscripts), or takes as other numbers.
UNICODE_DIGITS = ["²", "¹²", "٣", "3²"]


@pytest.mark.parametrize("digits", UNICODE_DIGITS)
async def test_unicode_digits_are_refused_at_the_edge(stack: Stack, digits: str) -> None:
    # Headers carry bytes, read as latin-1: a digit outside latin-1 arrives as other text.
    header = digits.encode("latin-1", errors="ignore") or digits.encode()
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        host = header + f"-{'a' * 20}.{DOMAIN}".encode()
        by_host = await http.get("/", headers={b"Host": host})
        by_header = await http.get("/", headers={b"E2b-Sandbox-Id": b"a" * 20,
                                                 b"E2b-Sandbox-Port": header})
        status = await http.get(f"/templates/t/builds/b/status?logsOffset={digits}",
                                headers={"X-API-Key": API_KEY})
        upload = await http.put(f"/templates/t/files/{'a' * 64}?expires={digits}&signature=x",
                                content=b"x")
        signed = await http.get(f"/files?path=/a&signature=v1_x&signature_expiration={digits}")
    assert by_host.status_code == 404, by_host.text  # no route: not a sandbox host
    assert (by_header.status_code, status.status_code) == (400, 400), (by_header.text,
                                                                         status.text)
    assert upload.status_code in (403, 503), upload.text
    assert signed.status_code == 401, signed.text
