"""A fake EnvdClient: a guest agent that answers at once, records each call, and can be told to
fail or to hold a call until released; no HTTP.

`fail_on[method]` makes the method raise (before any effect) for as long as the entry stays;
`hold(method)` makes its calls wait until the event it returns is set (`held` says when one does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aenv_nodeagent.envd_client import ENVD_PORT, EnvdClient

FAKE_ENVD_VERSION = "0.9.9-fake"


@dataclass(frozen=True)
class EnvdCall:
    method: str
    host: str
    access_token: str = ""  # the token presented (init: the one it hands over)
    current_token: str | None = None  # init only


class FakeEnvd:
    """Implements EnvdClient's methods in memory."""

    def __init__(self, version: str = FAKE_ENVD_VERSION) -> None:
        self.version = version
        self.calls: list[EnvdCall] = []
        self.fail_on: dict[str, BaseException] = {}
        self._gates: dict[str, asyncio.Event] = {}
        self._held: dict[str, asyncio.Event] = {}
        self.answering = True  # False: a wedged agent, its /health unanswered
        self.tokens: dict[str, str] = {}  # by host: the access token its last /init gave
        self.env_vars: dict[str, dict[str, str]] = {}  # by host: the variables it gave
        self.volume_mounts: dict[str, list[dict[str, Any]]] = {}  # by host: its last /init's
        self.figures: dict[str, float] = {
            "cpu_count": 1, "cpu_used_pct": 1.5, "mem_used": 64 << 20, "mem_total": 128 << 20,
            "mem_cache": 8 << 20, "disk_used": 1 << 30, "disk_total": 2 << 30}

    def methods_called(self) -> list[str]:
        return [call.method for call in self.calls]

    def hold(self, method: str) -> asyncio.Event:
        """Make calls of `method` wait, from now until the event returned is set."""
        self._gates[method] = gate = asyncio.Event()
        self._held[method] = asyncio.Event()
        return gate

    async def held(self, method: str) -> None:
        """Wait until a call of `method` waits at the gate `hold` put up."""
        await self._held[method].wait()

    async def wait_healthy(self, host: str, timeout_s: float, port: int = ENVD_PORT) -> float:
        await self._call(EnvdCall("wait_healthy", host))
        return 0.0

    async def answers(self, host: str, timeout_s: float, port: int = ENVD_PORT) -> bool:
        await self._call(EnvdCall("answers", host))
        return self.answering

    async def init(
        self,
        host: str,
        *,
        env_vars: Mapping[str, str],
        access_token: str,
        default_user: str = "user",
        default_workdir: str = "/home/user",
        current_token: str | None = None,
        volume_mounts: Sequence[Mapping[str, Any]] = (),
        port: int = ENVD_PORT,
        timeout_s: float = 10.0,
    ) -> str:
        await self._call(EnvdCall("init", host, access_token, current_token))
        self.tokens[host] = access_token
        self.env_vars[host] = dict(env_vars)
        self.volume_mounts[host] = [dict(mount) for mount in volume_mounts]
        return self.version

    async def metrics(
        self, host: str, access_token: str, port: int = ENVD_PORT
    ) -> dict[str, float]:
        await self._call(EnvdCall("metrics", host, access_token))
        return dict(self.figures)

    async def sync(
        self, host: str, access_token: str, timeout_s: float, port: int = ENVD_PORT
    ) -> None:
        await self._call(EnvdCall("sync", host, access_token))

    async def _call(self, call: EnvdCall) -> None:
        """Record the call, raise its injected failure, hold at its gate, yield once."""
        self.calls.append(call)
        if call.method in self.fail_on:
            raise self.fail_on[call.method]
        gate = self._gates.get(call.method)
        if gate is not None and not gate.is_set():
            self._held[call.method].set()
            await gate.wait()
        await asyncio.sleep(0)


class _Envd(Protocol):
    """EnvdClient's surface, which mypy checks both classes against below."""

    async def wait_healthy(self, host: str, timeout_s: float, port: int = ENVD_PORT) -> float: ...

    async def answers(self, host: str, timeout_s: float, port: int = ENVD_PORT) -> bool: ...

    async def init(
        self, host: str, *, env_vars: Mapping[str, str], access_token: str,
        default_user: str = "user", default_workdir: str = "/home/user",
        current_token: str | None = None, port: int = ENVD_PORT, timeout_s: float = 10.0,
    ) -> str: ...

    async def metrics(
        self, host: str, access_token: str, port: int = ENVD_PORT
    ) -> dict[str, float]: ...

    async def sync(
        self, host: str, access_token: str, timeout_s: float, port: int = ENVD_PORT
    ) -> None: ...


_REAL_ENVD: type[_Envd] = EnvdClient
_FAKE_ENVD: type[_Envd] = FakeEnvd
