"""The SNI / Host sniffer on real ClientHellos (Python's ssl, `openssl s_client`), split into
many TLS records and cut anywhere, on HTTP/1.x heads, and on garbage."""

from __future__ import annotations

import os
import random
import socket
import ssl
import subprocess
import threading

import pytest

from aenv_nodeagent.egress.sniff import NEED_MORE, Sniffed, host_name, sniff


def python_client_hello(server_name: str | None) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname = server_name is not None
    if server_name is None:
        context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def openssl_client_hello(server_name: str) -> bytes:
    """What `openssl s_client -servername` sends first, caught by a plain TCP listener."""
    listener = socket.create_server(("127.0.0.1", 0))
    caught: list[bytes] = []

    def catch() -> None:
        conn, _ = listener.accept()
        conn.settimeout(5)
        data = b""
        while not sniff(data).complete:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        caught.append(data)
        conn.close()

    thread = threading.Thread(target=catch)
    thread.start()
    port = listener.getsockname()[1]
    subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}",
                    "-servername", server_name], input=b"", capture_output=True, timeout=20,
                   check=False)
    thread.join(10)
    listener.close()
    return caught[0]


def refragment(hello: bytes, sizes: list[int]) -> bytes:
    """The same handshake bytes carried in records of the given payload sizes (the last takes
    what is left), as a client may legally send them."""
    assert hello[0] == 0x16
    payload = hello[5:5 + int.from_bytes(hello[3:5], "big")]
    out, pos = b"", 0
    for size in [*sizes, len(payload)]:
        part = payload[pos:pos + size]
        if not part:
            break
        out += b"\x16\x03\x01" + len(part).to_bytes(2, "big") + part
        pos += len(part)
    return out


def test_python_client_hello_names_its_server() -> None:
    assert sniff(python_client_hello("api.example.com")) == Sniffed(True, "api.example.com", True)


def test_openssl_client_hello_names_its_server_in_lower_case() -> None:
    assert sniff(openssl_client_hello("Api.Example.COM")).name == "api.example.com"


def test_a_hello_without_sni_has_no_name() -> None:
    assert sniff(python_client_hello(None)) == Sniffed(True, None, True)


def test_a_hello_split_over_records_and_cut_anywhere() -> None:
    whole = refragment(python_client_hello("a.b.example.org"), [1, 3, 40, 7])
    for cut in range(len(whole)):
        assert not sniff(whole[:cut]).complete, cut  # never a verdict on part of it
    assert sniff(whole).name == "a.b.example.org"


def test_garbage_is_judged_at_once_without_a_name() -> None:
    rng = random.Random(7)
    for _ in range(300):
        data = bytes([0x16, 3, 1]) + rng.randbytes(rng.randrange(2, 600))
        result = sniff(data)
        assert result.name is None or host_name(result.name.encode()) == result.name
    assert sniff(b"\x00" + os.urandom(63)).complete
    assert sniff(b"\x16\x03\x01\x00\x05\x02\x00\x00\x01\x00") == Sniffed(True, None, True)
    assert sniff(b"SSH-2.0-OpenSSH_9.2\r\n") == Sniffed(True)


def test_a_corrupt_server_name_extension_yields_no_name() -> None:
    hello = bytearray(python_client_hello("api.example.com"))
    at = hello.index(b"api.example.com")
    hello[at - 2:at] = (200).to_bytes(2, "big")  # a name length running past the extension
    assert sniff(bytes(hello)) == Sniffed(True, None, True)


@pytest.mark.parametrize(("head", "name"), [
    (b"GET / HTTP/1.1\r\nHost: Example.COM.\r\n\r\n", "example.com"),
    (b"POST /x HTTP/1.0\r\nhost:api.example.com:8080\r\nA: b\r\n\r\n", "api.example.com"),
    (b"GET http://abs.example.net/p HTTP/1.1\r\nHost: other.example\r\n\r\n", "abs.example.net"),
    (b"GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n", None),
    (b"GET / HTTP/1.1\r\nHost: 203.0.113.5\r\n\r\n", None),
    (b"GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n", None),
    (b"GET / HTTP/1.1\r\n\r\n", None),
    (b"GET / HTTP/2.0\r\nHost: a.example\r\n\r\n", None),
])
def test_http_host(head: bytes, name: str | None) -> None:
    assert sniff(head) == Sniffed(True, name)


def test_an_unfinished_http_head_waits_for_more() -> None:
    head = b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"
    for cut in range(1, len(head)):
        assert sniff(head[:cut]) == NEED_MORE, head[:cut]
    assert sniff(b"") == NEED_MORE


@pytest.mark.parametrize("raw", [b"", b"a..b", b"-a.example", b"x" * 64 + b".example",
                                 b"caf\xc3\xa9.example", b"a b.example", b"1.2.3.4"])
def test_what_is_not_a_host_name(raw: bytes) -> None:
    assert host_name(raw) is None
