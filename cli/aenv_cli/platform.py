"""The single-node platform: etcd and the services as child processes under one data directory.

`aenv up` and the end-to-end tests start it the same way:

    platform = Platform(home, PlatformPorts())
    await platform.start()        # raises PlatformStartError (with the log tail) on failure
    ...platform.api_url, platform.api_key...
    await platform.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

from aenv_cli.children import ChildProcess
from aenv_cli.edge import PublicEdge
from aenv_cli.files import (
    API_KEY_FILE,
    E2B_ENV_FILE,
    e2b_env_lines,
    read_api_key,
    write_private_file,
)
from aenv_cli.homelock import HomeLock
from aenv_cli.ports import PlatformPorts, address
from aenv_cli.services import (
    ServiceSpec,
    default_service_table,
    service_environment,
    with_commands,
)
from aenv_cli.state import save_ports
from aenv_common.errors import Unavailable
from aenv_common.secrets import create_key_file

log = logging.getLogger(__name__)

PROBE_INTERVAL_S = 0.1
API_KEY_WAIT_S = 10.0
# The platform secrets key (aenv_common/secrets/sealing.py), shared by the gateway and the node.
SECRETS_KEY_FILE = "secrets.key"


class PlatformStartError(Unavailable):
    """A service did not come up; `log_tail` is the end of its log."""

    def __init__(self, service: str, reason: str, log_tail: str) -> None:
        super().__init__(f"{service} {reason}")
        self.service = service
        self.log_tail = log_tail


class ServiceExited(Exception):
    """Internal: a child exited while we were waiting for it to become ready."""


class Platform:
    def __init__(
        self,
        home: Path,
        ports: PlatformPorts | None = None,
        *,
        commands: Mapping[str, Sequence[str]] | None = None,
        base_env: Mapping[str, str] | None = None,
        edge: PublicEdge | None = None,
    ) -> None:
        self.home = home.absolute()
        self.ports = ports or PlatformPorts()
        # The HTTPS edge for E2B_DOMAIN-only SDK programs; None: loopback HTTP only.
        self.edge = edge
        table = default_service_table(self.home, self.ports)
        self.services: list[ServiceSpec] = with_commands(table, commands or {})
        self._env = service_environment(
            self.home, self.ports, os.environ if base_env is None else base_env
        )
        if edge is not None:
            self._env.update(edge.gateway_environment(self.home))
        # Named to every service, so a gateway and a node agent never seal with different keys.
        self._env.setdefault("AENV_SECRETS_KEY_FILE", str(self.home / SECRETS_KEY_FILE))
        self._lock = HomeLock(self.home)
        self._children: list[ChildProcess] = []
        self._api_key: str | None = None

    # -- what a started platform offers ------------------------------------------------------

    @property
    def api_url(self) -> str:
        return f"http://{address(self.ports.gateway_http)}"

    @property
    def sandbox_url(self) -> str:
        return self.api_url

    @property
    def grpc_address(self) -> str:
        return address(self.ports.gateway_grpc)

    @property
    def etcd_endpoints(self) -> str:
        return address(self.ports.etcd_client)

    @property
    def e2b_env_path(self) -> Path:
        return self.home / E2B_ENV_FILE

    @property
    def api_key(self) -> str:
        if self._api_key is None:
            raise Unavailable("the platform is not started")
        return self._api_key

    @property
    def children(self) -> list[ChildProcess]:
        return list(self._children)

    def e2b_env(self) -> dict[str, str]:
        """The variables an SDK program needs to use this platform: E2B_API_KEY and either the
        edge's E2B_DOMAIN (with SSL_CERT_FILE for a self-signed edge) or loopback URLs."""
        return dict(line.split("=", 1) for line in self.e2b_env_lines())

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Starts every service in order and waits for each to be ready. On any failure (or
        cancellation) everything already started is stopped before the error propagates."""
        self.home.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        try:
            save_ports(self.home, self.ports)
            create_key_file(Path(self._env["AENV_SECRETS_KEY_FILE"]))
            if self.edge is not None:
                self.edge.prepare(self.home)
            for spec in self.services:
                await self._start_service(spec)
            self._api_key = await self._wait_for_api_key()
            write_private_file(self.e2b_env_path, "\n".join(self.e2b_env_lines()) + "\n")
        except BaseException:
            await self.stop()
            raise
        log.info("platform ready", extra={"home": str(self.home), "api_url": self.api_url})

    async def stop(self) -> None:
        """Stops the children in reverse start order (etcd last) and releases the home. A
        service that could not stop by itself (it had died, or ignored SIGTERM) gets its cleanup
        run in its place in that order, so however the platform stops, nothing it started is
        left running."""
        while self._children:
            child = self._children.pop()
            spec = self._spec(child.name)
            was_running = child.returncode is None
            code = await child.stop(spec.stop_timeout_s)
            if spec.cleanup_argv is not None and not (was_running and code == 0):
                await self._clean_up_after(spec)
        self._api_key = None
        self._lock.release()

    async def restart_service(self, name: str, *, crash: bool = False) -> None:
        """Stop one service (with `crash`, kill it as a crash would) and start it again, in its
        place in the stop order; returns once it is ready."""
        async with self.service_down(name, crash=crash):
            pass

    @contextlib.asynccontextmanager
    async def service_down(self, name: str, *, crash: bool = False) -> AsyncIterator[None]:
        """One service stopped (with `crash`, killed as a crash would) for the body, then
        started again in its place in the stop order, ready when the block ends."""
        spec = self._spec(name)
        index, child = next((i, c) for i, c in enumerate(self._children) if c.name == name)
        if crash:
            await child.crash()
        else:
            await child.stop(spec.stop_timeout_s)
        del self._children[index]
        try:
            yield
        finally:
            await self._start_service(spec)
            self._children.insert(index, self._children.pop())

    def service_env(self) -> dict[str, str]:
        """The environment the services run with (to start more of them beside, in tests)."""
        return dict(self._env)

    async def wait_for_exit(self) -> ChildProcess:
        """Returns the first child that exits (a running platform lost a service)."""
        waits = {asyncio.ensure_future(child.wait()): child for child in self._children}
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
        return waits[done.pop()]

    def e2b_env_lines(self) -> list[str]:
        if self.edge is not None:
            return self.edge.e2b_env_lines(self.api_key, self.home)
        return e2b_env_lines(self.api_key, self.api_url, self.sandbox_url)

    # -- internals -----------------------------------------------------------------------------

    def _spec(self, name: str) -> ServiceSpec:
        return next(spec for spec in self.services if spec.name == name)

    async def _clean_up_after(self, spec: ServiceSpec) -> None:
        assert spec.cleanup_argv is not None
        name = f"{spec.name}-cleanup"
        cleanup = await ChildProcess.spawn(
            name, spec.cleanup_argv, self._env, self.home / "logs" / f"{name}.log")
        try:
            code = await asyncio.wait_for(cleanup.wait(), spec.stop_timeout_s)
        except TimeoutError:
            code = await cleanup.stop(0)
        log.info("service cleaned up after", extra={"service": spec.name, "code": code})

    async def _start_service(self, spec: ServiceSpec) -> None:
        log_path = self.home / "logs" / f"{spec.name}.log"
        child = await ChildProcess.spawn(spec.name, spec.argv, self._env, log_path)
        self._children.append(child)
        started = time.monotonic()
        try:
            await asyncio.wait_for(self._until_ready(spec, child), spec.start_timeout_s)
        except ServiceExited:
            raise PlatformStartError(
                spec.name, f"exited with code {child.returncode} during start-up", child.log_tail()
            ) from None
        except TimeoutError:
            raise PlatformStartError(
                spec.name,
                f"not ready after {spec.start_timeout_s:.0f}s ({spec.probe.describe()})",
                child.log_tail(),
            ) from None
        log.info(
            "service ready",
            extra={"service": spec.name, "pid": child.pid, "ms": _ms_since(started)},
        )

    @staticmethod
    async def _until_ready(spec: ServiceSpec, child: ChildProcess) -> None:
        exited = asyncio.ensure_future(child.wait())
        try:
            while not exited.done():
                if await spec.probe.ready():
                    return
                # Sleep by waiting on the exit: a crash ends the wait at once.
                await asyncio.wait({exited}, timeout=PROBE_INTERVAL_S)
        finally:
            exited.cancel()
        raise ServiceExited(spec.name)

    async def _wait_for_api_key(self) -> str:
        """The gateway writes its generated key before it answers /health; allow a little slack
        for gateways that write it just after."""
        deadline = time.monotonic() + API_KEY_WAIT_S
        while True:
            try:
                key = read_api_key(self.home)
            except FileNotFoundError:
                key = ""
            if key:
                return key
            if time.monotonic() > deadline:
                gateway = self._children[-1]
                reason = f"wrote no API key to {self.home / API_KEY_FILE}"
                raise PlatformStartError(gateway.name, reason, gateway.log_tail())
            await asyncio.sleep(PROBE_INTERVAL_S)


def _ms_since(start: float) -> int:
    return int((time.monotonic() - start) * 1000)
