"""`aenv leases` over the fake server: the key's leases as a table, and the server's JSON."""

from __future__ import annotations

import json

from aenv_cli_fake_server import FakeServer, fake_clients, invoke

LEASE = {"leaseID": "lease-abc", "name": "run-7", "ttlSeconds": 30, "onExpiry": "pause",
         "metadata": {}, "createdAt": "2026-12-06T10:00:00Z",
         "expiresAt": "2026-12-06T10:00:30Z", "sandboxCount": 200}


def test_leases_table_and_json() -> None:
    server = FakeServer()
    server.leases = [LEASE]
    table = invoke(fake_clients(server), "leases", "-o", "table")
    assert table.exit_code == 0, table.output
    row = next(line for line in table.stdout.splitlines() if "lease-abc" in line).split()
    assert row == ["lease-abc", "run-7", "pause", "30s", "2026-12-06", "10:00:30", "200"]
    assert "CREATED" not in table.stdout
    assert "10:00:00" in invoke(fake_clients(server), "leases", "-o", "wide").stdout
    assert json.loads(invoke(fake_clients(server), "leases").stdout) == [LEASE]
    assert server.requests[-1][:2] == ("GET", "/leases")
