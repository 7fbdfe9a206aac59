import socket
from pathlib import Path

import pytest

from aenv_testing.ports import LOOPBACK, LOWEST, free_port


def test_free_ports_lie_below_the_ephemeral_range_and_can_be_bound() -> None:
    ephemeral_start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(20)]
    assert len(set(ports)) == len(ports)
    assert all(LOWEST <= port < ephemeral_start for port in ports)
    with socket.socket() as sock:
        sock.bind((LOOPBACK, ports[0]))


def test_a_port_something_listens_on_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two adjacent ports free now, wherever they are: the host may have its own listeners at LOWEST.
    lowest = _two_adjacent_free_ports()
    monkeypatch.setattr("aenv_testing.ports._handed_out", set())
    monkeypatch.setattr("aenv_testing.ports.LOWEST", lowest)
    monkeypatch.setattr("aenv_testing.ports._ephemeral_start", lambda: lowest + 2)
    with socket.socket() as listener:
        listener.bind((LOOPBACK, lowest))
        listener.listen()
        assert free_port() == lowest + 1
        with pytest.raises(RuntimeError, match="no free loopback port"):
            free_port()


def _two_adjacent_free_ports() -> int:
    for port in range(LOWEST, LOWEST + 2000, 2):
        if _bindable(port) and _bindable(port + 1):
            return port
    raise AssertionError(f"no two adjacent free ports in {LOWEST}-{LOWEST + 2000}")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
        return True
