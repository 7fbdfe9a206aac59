"""The guest side of bench/egress.py (standard library only; run by python3 in a sandbox).

    python3 _egress_guest.py <address> <name> <cafile> <rounds> <tls_rounds> <download_bytes>

Connects to <address> naming <name> (Host header, TLS SNI): the name is resolved once, by the
guest's resolver when <address> is "-", so every timed request measures the data path only.
Prints JSON (seconds): keep-alive request latencies on one HTTP connection, TLS
connect+handshake+request latencies (a new connection each), and one download of
<download_bytes> on a keep-alive connection.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import sys
import time


class _Named(http.client.HTTPSConnection):
    """HTTPS to an address with the name as SNI and in the certificate check."""

    def __init__(self, address: str, name: str, context: ssl.SSLContext) -> None:
        super().__init__(name, 443, context=context, timeout=60)
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, 443), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


def _get(conn: http.client.HTTPConnection, path: str, name: str) -> bytes:
    conn.request("GET", path, headers={"Host": name})
    response = conn.getresponse()
    body = response.read()
    if response.status != 200:
        raise SystemExit(f"{path}: HTTP {response.status}")
    return body


def main(address: str, name: str, cafile: str, rounds: int, tls_rounds: int,
         download: int) -> None:
    if address == "-":
        address = socket.gethostbyname(name)
    plain = http.client.HTTPConnection(address, 80, timeout=60)
    _get(plain, "/echo", name)  # connection set up, not timed
    keepalive = []
    for _ in range(rounds):
        started = time.perf_counter()
        _get(plain, "/echo", name)
        keepalive.append(time.perf_counter() - started)
    started = time.perf_counter()
    size = len(_get(plain, f"/bytes/{download}", name))
    download_s = time.perf_counter() - started
    plain.close()
    context = ssl.create_default_context(cafile=cafile)
    tls = []
    for _ in range(tls_rounds):
        started = time.perf_counter()
        conn = _Named(address, name, context)
        _get(conn, "/echo", name)
        tls.append(time.perf_counter() - started)
        conn.close()
    print(json.dumps({"keepalive_s": keepalive, "tls_s": tls, "download_bytes": size,
                      "download_s": download_s}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
         int(sys.argv[6]))
