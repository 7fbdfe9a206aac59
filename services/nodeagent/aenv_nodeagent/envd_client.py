"""The node agent's side of envd: readiness and `/init` after every boot, restore or fork."""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import aiohttp
from opentelemetry.sdk.trace import TracerProvider

from aenv_common.errors import DeadlineExceeded, Internal, Unavailable
from aenv_nodeagent.guest_spans import record_envd_span, traced

ENVD_PORT = 49983
# One attempt's connect (a guest whose network is not up yet drops the SYN); then again.
_CONNECT_TIMEOUT_S = 2.0


def guest_session() -> aiohttp.ClientSession:
    """The node agent's HTTP session to its guests (envd, their commands): a connection per
    request, none kept alive. A kept-alive one would outlive its VM: a reset's guest, or the
    next VM at a slot's address restored from a capture, has the captured guest's side of it
    and leaves a request on it unanswered. (Sandbox traffic has pools of its own, per VM,
    proxy.py.)"""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True))


class EnvdClient:
    """`session`: a guest_session in a node agent (a restore's /init must not take a kept-alive
    connection)."""

    def __init__(
        self, session: aiohttp.ClientSession, tracer_provider: TracerProvider | None = None,
        *, egress_ca_pem: str | None = None,
    ) -> None:
        self._session = session
        # Where envd's spans are recorded (None: this process's tracer provider).
        self._tracer_provider = tracer_provider
        # The cluster's egress CA (egress/certs.py), installed into every guest's trust at
        # /init: the certificates of hosts with header rules are issued by it.
        self._egress_ca_pem = egress_ca_pem

    async def wait_healthy(self, host: str, timeout_s: float, port: int = ENVD_PORT) -> float:
        """Polls `GET /health` until envd answers; returns the seconds it took."""
        started = time.monotonic()
        deadline = started + timeout_s
        url = f"http://{host}:{port}/health"
        last_error = "no answer"
        while time.monotonic() < deadline:
            try:
                probe = self._session.get(url, timeout=aiohttp.ClientTimeout(total=2))
                async with probe as resp:
                    if resp.status < 300:
                        return time.monotonic() - started
                    last_error = f"HTTP {resp.status}"
            except (aiohttp.ClientError, TimeoutError) as err:
                last_error = type(err).__name__
            # Short sleeps: a restored guest answers within a few ms on KVM.
            await asyncio.sleep(0.005)
        raise DeadlineExceeded(
            f"envd did not become healthy within {timeout_s:.0f}s ({last_error})"
        )

    async def answers(self, host: str, timeout_s: float, port: int = ENVD_PORT) -> bool:
        """Whether envd answers `GET /health` within `timeout_s` (one probe: a pause asks it)."""
        try:
            probe = self._session.get(
                f"http://{host}:{port}/health", timeout=aiohttp.ClientTimeout(total=timeout_s))
            async with probe as resp:
                return resp.status < 300
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def init(
        self,
        host: str,
        *,
        env_vars: Mapping[str, str],
        access_token: str,
        default_user: str | None = None,
        default_workdir: str | None = None,
        current_token: str | None = None,
        volume_mounts: Sequence[Mapping[str, Any]] = (),
        port: int = ENVD_PORT,
        timeout_s: float = 10.0,
    ) -> str:
        """Hands the guest its identity: env vars, access token, the host's clock (a restored
        guest's clock is behind by the paused time) and fresh entropy (a restored guest's RNG state
        is a clone of the snapshot's). The env vars add to those the guest has (a template's
        ENV steps); the default user and workdir, when given, replace its own (a template
        captured them); the guest trusts the cluster's egress CA; the volumes are mounted through
        the slot's relay (``volumes.envd_mounts``; envd skips a path already mounted from the same
        source: a guest restored from memory). Returns envd's version.

        A guest just restored or booted gets its /init as its first request, retried until
        `timeout_s` while it reaches no envd yet, instead of after /health probes (one request
        fewer on every restore's path, and the one a cold guest translates first under TCG).

        :raise DeadlineExceeded: envd did not answer within `timeout_s`.
        :raise Internal: envd refused the /init.
        """
        body: dict[str, Any] = {
            "envVars": dict(env_vars),
            "accessToken": access_token,
            "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "entropy": base64.b64encode(os.urandom(64)).decode(),
        }
        if default_user:
            body["defaultUser"] = default_user
        if default_workdir:
            body["defaultWorkdir"] = default_workdir
        if self._egress_ca_pem:
            body["egressCaCert"] = self._egress_ca_pem
        if volume_mounts:
            body["volumeMounts"] = [dict(mount) for mount in volume_mounts]
        url = f"http://{host}:{port}/init"
        # A guest restored from a sandbox (not a template) already enforces that sandbox's token.
        headers = traced(_token_header(current_token))
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return await self._post_init(url, body, headers, deadline - time.monotonic())
            except (aiohttp.ClientConnectionError, TimeoutError) as err:
                if not _not_delivered(err) or time.monotonic() >= deadline:
                    raise DeadlineExceeded(
                        f"envd did not answer /init within {timeout_s:.0f}s "
                        f"({type(err).__name__})") from err
            await asyncio.sleep(0.005)  # a restored guest answers within a few ms on KVM

    async def _post_init(
        self, url: str, body: Mapping[str, Any], headers: Mapping[str, str], timeout_s: float,
    ) -> str:
        # The session must be a guest_session: a kept-alive connection would reach the VM
        # before this one, or the captured guest's envd, which leaves it unanswered.
        async with self._session.post(
            url, json=body, headers=headers,
            timeout=aiohttp.ClientTimeout(total=max(timeout_s, 0.001),
                                          sock_connect=_CONNECT_TIMEOUT_S),
        ) as resp:
            record_envd_span("envd POST /init", resp.headers, self._tracer_provider)
            if resp.status >= 300:
                raise Internal(f"envd /init failed: HTTP {resp.status} {await resp.text()}")
            return resp.headers.get("X-Envd-Version", "0.0.0")

    async def metrics(
        self, host: str, access_token: str, port: int = ENVD_PORT
    ) -> dict[str, float]:
        """envd's live figures (`GET /metrics`): CPU, memory and disk of the guest."""
        url = f"http://{host}:{port}/metrics"
        async with self._session.get(
            url, headers=_token_header(access_token), timeout=aiohttp.ClientTimeout(total=10)
        ) as resp:
            if resp.status >= 300:
                raise Internal(f"envd /metrics failed: HTTP {resp.status}")
            data: dict[str, float] = await resp.json()
            return data

    async def sync(
        self, host: str, access_token: str, timeout_s: float, port: int = ENVD_PORT
    ) -> None:
        """Flush the guest's page cache to its disks (before a filesystem-only capture: what the
        guest wrote must be on the disk layer, not only in its RAM)."""
        try:
            async with self._session.post(
                f"http://{host}:{port}/sync", headers=traced(_token_header(access_token)),
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as resp:
                record_envd_span("envd POST /sync", resp.headers, self._tracer_provider)
                if resp.status >= 300:
                    raise Internal(f"envd /sync failed: HTTP {resp.status}")
        except (aiohttp.ClientError, TimeoutError) as err:
            # E2B refuses it the same way (503, the SDK's ServiceBusyException); it keeps running.
            raise Unavailable(f"the guest agent did not answer, its files cannot be flushed: "
                           f"{type(err).__name__}") from err


def _token_header(token: str | None) -> dict[str, str]:
    return {"X-Access-Token": token} if token else {}


def _not_delivered(err: BaseException) -> bool:
    """Whether the request cannot have reached envd: no connection was made (refused, no route,
    the connect timed out) or it was dropped unanswered (the guest's network coming up); so
    sending it again cannot apply it twice. Waiting for the answer timed out is not one of
    them."""
    if isinstance(err, aiohttp.ServerTimeoutError):
        return isinstance(err, aiohttp.ConnectionTimeoutError)
    return isinstance(err, aiohttp.ClientConnectionError)
