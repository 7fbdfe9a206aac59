"""The real `python -m aenv_envd` process: start-up time and keep-alive latency (TCP_NODELAY)."""

from __future__ import annotations

import http.client
import os
import statistics
import time
import urllib.parse
from pathlib import Path

from envd_harness import _wait_healthy, start_envd, stop_process


def test_starts_in_under_a_second_and_answers_fast() -> None:
    begin = time.monotonic()
    process, url = start_envd()
    try:
        _wait_healthy(url, process, timeout_s=5)
        startup = time.monotonic() - begin
        # Wall time depends on how loaded the shared 2-core box is; the CPU envd spent until it
        # answered does not (0.3 s when measured, < 1 s wall on an idle host).
        fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        assert cpu_s < 0.8, f"envd used {cpu_s:.2f}s of CPU to start"
        assert startup < 5.0, f"envd took {startup:.2f}s to answer /health"
        parsed = urllib.parse.urlsplit(url)
        connection = http.client.HTTPConnection(parsed.hostname or "", parsed.port, timeout=5)
        samples = []
        for _ in range(30):
            start = time.perf_counter()
            connection.request(
                "POST",
                "/process.Process/List",
                body=b"{}",
                headers={"content-type": "application/json"},
            )
            response = connection.getresponse()
            response.read()
            samples.append(time.perf_counter() - start)
            assert response.status == 200
        connection.close()
        # Nagle + delayed ACK would show up as ~40 ms per request on a kept-alive connection.
        assert statistics.median(samples) < 0.02
    finally:
        stop_process(process)
