"""/init's RNG reseed: the seed is mixed into the pool, credited, then the CRNG is reseeded from
it (a restored clone otherwise reads its image's CRNG until the next scheduled reseed). The
pool is a real file here and the kernel's ioctls are recorded: tests must not reseed the host."""

from __future__ import annotations

import base64
import errno
import functools
import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from aenv_envd import system
from aenv_envd.app import build_app
from aenv_envd.config import EnvdConfig
from aenv_envd.state import SandboxState


@dataclass
class Call:
    request: int
    arg: object
    device_bytes: bytes  # what had reached the device when the ioctl was issued


class FakeKernel:
    """Stands in for fcntl.ioctl on the pool device: records each request, may fail some."""

    def __init__(self, device: Path, fail: dict[int, int] | None = None) -> None:
        self.device = device
        self.fail = fail or {}
        self.calls: list[Call] = []

    def ioctl(self, fd: int, request: int, arg: object = 0) -> int:
        assert os.path.samestat(os.fstat(fd), self.device.stat()), "ioctl on another file"
        self.calls.append(Call(request, arg, self.device.read_bytes()))
        if request in self.fail:
            raise OSError(self.fail[request], os.strerror(self.fail[request]))
        return 0


@pytest.fixture
def device(tmp_path: Path) -> Path:
    path = tmp_path / "urandom"
    path.touch()
    return path


def install(monkeypatch: pytest.MonkeyPatch, kernel: FakeKernel) -> None:
    monkeypatch.setattr("aenv_envd.system.fcntl.ioctl", kernel.ioctl)


def test_seed_is_mixed_credited_then_the_crng_reseeded_from_it(
    monkeypatch: pytest.MonkeyPatch, device: Path
) -> None:
    kernel = FakeKernel(device)
    install(monkeypatch, kernel)
    seed = os.urandom(64)
    system.reseed_rng(seed, device=str(device))
    assert device.read_bytes() == seed
    assert [c.request for c in kernel.calls] == [system.RNDADDENTROPY, system.RNDRESEEDCRNG]
    credit, reseed = kernel.calls
    assert credit.arg == struct.pack("ii", 512, 64) + seed
    assert reseed.device_bytes == seed  # the reseed extracts a pool that holds the seed


def test_the_requests_are_the_kernels() -> None:
    # _IOW('R', 0x03, int[2]) and _IO('R', 0x07) from include/uapi/linux/random.h
    assert system.RNDADDENTROPY == (1 << 30) | (8 << 16) | (ord("R") << 8) | 0x03
    assert system.RNDRESEEDCRNG == (ord("R") << 8) | 0x07


def test_reseeds_even_when_the_credit_is_refused(
    monkeypatch: pytest.MonkeyPatch, device: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kernel = FakeKernel(device, fail={system.RNDADDENTROPY: errno.EPERM})
    install(monkeypatch, kernel)
    with caplog.at_level(logging.INFO, logger=system.__name__):
        system.reseed_rng(b"x" * 32, device=str(device))
    assert [c.request for c in kernel.calls] == [system.RNDADDENTROPY, system.RNDRESEEDCRNG]
    assert [r.message for r in caplog.records] == ["entropy mixed without credit"]


def test_a_refused_reseed_is_logged_not_raised(
    monkeypatch: pytest.MonkeyPatch, device: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kernel = FakeKernel(device, fail={system.RNDRESEEDCRNG: errno.EPERM})
    install(monkeypatch, kernel)
    with caplog.at_level(logging.INFO, logger=system.__name__):
        system.reseed_rng(b"x" * 32, device=str(device))
    [warning] = caplog.records
    assert warning.levelno == logging.WARNING and "not reseeded" in warning.message
    assert warning.__dict__["errno"] == errno.EPERM


def test_init_reseeds_with_the_entropy_it_was_given(
    monkeypatch: pytest.MonkeyPatch, device: Path
) -> None:
    kernel = FakeKernel(device)
    install(monkeypatch, kernel)
    monkeypatch.setattr("aenv_envd.control_http.reseed_rng",
                        functools.partial(system.reseed_rng, device=str(device)))
    seed = os.urandom(64)
    app = build_app(EnvdConfig(sync_clock=False, reseed_rng=True), SandboxState())
    with TestClient(app) as client:
        bad = client.post("/init", json={"entropy": "not base64!"})
        assert bad.status_code == 400 and kernel.calls == []
        ok = client.post("/init", json={"entropy": base64.b64encode(seed).decode()})
        assert ok.status_code == 204
    assert device.read_bytes() == seed
    assert [c.request for c in kernel.calls] == [system.RNDADDENTROPY, system.RNDRESEEDCRNG]
