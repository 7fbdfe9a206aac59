import socket
from pathlib import Path

import pytest

from aenv_common.testing.ports import LOOPBACK, LOWEST, free_port


def test_free_ports_lie_below_the_ephemeral_range_and_can_be_bound() -> None:
    ephemeral_start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(20)]
    assert len(set(ports)) == len(ports)
    assert all(LOWEST <= port < ephemeral_start for port in ports)
    with socket.socket() as sock:
        sock.bind((LOOPBACK, ports[0]))


def test_a_port_something_listens_on_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("aenv_common.testing.ports._handed_out", set())
    monkeypatch.setattr("aenv_common.testing.ports._ephemeral_start", lambda: LOWEST + 2)
    with socket.socket() as listener:
        listener.bind((LOOPBACK, LOWEST))
        listener.listen()
        assert free_port() == LOWEST + 1
        with pytest.raises(RuntimeError, match="no free loopback port"):
            free_port()
