"""The node agent's side of the egress process: it starts it, talks to it, restarts it.

The agent stays the privileged party. It spawns ``python -m aenv_nodeagent.egress``, which
becomes the unprivileged ``egress_uid`` before it reads anything from the channel (it drops
itself, once its modules are loaded: the interpreter may live where that uid cannot read, e.g.
under /root; leaving root clears every capability), arms PR_SET_PDEATHSIG and sets no_new_privs.
One end of a socketpair is its control channel (egress/control.py); ``configure`` comes first.

It keeps the desired state — which slot netns are attached, with which owner and policy — so a
child that dies is replaced (back-off 0.2 s doubling to 10 s, reset after a minute alive) and
every slot re-attached with fresh listeners: guests lose their open proxied connections, never
their policy. While no child runs, requests only change the desired state; nft still redirects
to the (closed) listeners, so guest connections are refused rather than let through.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from ipaddress import ip_address

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, InvalidArgument, NotFound, Unavailable
from aenv_nodeagent.network.firewall import EgressPorts

from .control import Channel, ChannelClosed, Configure, Message, netns_of, policy_field
from .listeners import SlotListeners, open_listeners

log = logging.getLogger(__name__)

EGRESS_MODULE = "aenv_nodeagent.egress"
BACKOFF_FIRST_S = 0.2
BACKOFF_MAX_S = 10.0
STABLE_AFTER_S = 60.0
STOP_GRACE_S = 3.0
CONFIGURE_TIMEOUT_S = 60.0  # its start loads TLS, DNS and etcd clients; a busy host is slow

# Gets a slot's netns, the addresses the resolver answered and their TTL; adds them to the
# slot's nft sets (network/resolved_sets.py).
ResolvedSink = Callable[[str, list[str], float], Awaitable[None]]
# Makes a slot's listeners (listeners.open_listeners; tests bind elsewhere).
Listen = Callable[[str, EgressPorts], Awaitable[SlotListeners]]


@dataclass
class _Attachment:
    owner_key_id: str
    policy: bytes


@dataclass(frozen=True)
class SupervisorSettings:
    uid: int | None  # None: the child keeps the agent's uid (tests, an unprivileged agent)
    ports: EgressPorts = field(default_factory=EgressPorts)
    command: Sequence[str] = ()  # default: this interpreter running EGRESS_MODULE


class EgressSupervisor:
    def __init__(self, settings: SupervisorSettings, configure: Configure,
                 on_resolved: ResolvedSink, listen: Listen = open_listeners) -> None:
        self._settings = settings
        self._listen = listen
        self._configure = configure
        self._on_resolved = on_resolved
        self._slots: dict[str, _Attachment] = {}
        self._lock = asyncio.Lock()  # one child change or slot request at a time
        self._process: asyncio.subprocess.Process | None = None
        self._channel: Channel | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._stopping = False
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        """The running egress process (for measuring it: bench/egress.py reads its RSS)."""
        return self._process.pid if self._process and self._process.returncode is None else None

    @property
    def ca_cert_pem(self) -> str:
        """The cluster egress CA every guest trusts (envd installs it at /init)."""
        return self._configure.ca_cert_pem

    @property
    def ports(self) -> EgressPorts:
        return self._settings.ports

    def attached(self) -> set[str]:
        return set(self._slots)

    async def start(self) -> None:
        """Spawn and configure the first child; raises if it cannot start at all."""
        async with self._lock:
            try:
                await self._spawn()
            except BaseException:
                await self._end_child()
                raise
        self._monitor = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        self._stopping = True
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
        async with self._lock:
            await self._end_child()

    async def attach(self, netns: str, owner_key_id: str,
                     policy: cluster_pb2.NetworkPolicy) -> None:
        """Hand the slot's listeners and policy to the egress process (replacing an earlier
        attachment of the same netns)."""
        async with self._lock:
            self._slots[netns] = _Attachment(owner_key_id, policy.SerializeToString())
            try:
                await self._attach(netns, self._slots[netns])
            except BaseException:
                # Not attached (fail closed: nft redirects to no listener); not re-attached by
                # a restart either.
                del self._slots[netns]
                with contextlib.suppress(AenvError):
                    await self._request("detach", {"netns": netns})
                raise

    async def update(self, netns: str, policy: cluster_pb2.NetworkPolicy) -> None:
        async with self._lock:
            current = self._slots.get(netns)
            if current is None:
                raise NotFound(f"egress of {netns} is not attached")
            current.policy = policy.SerializeToString()
            await self._request("update", {"netns": netns, "policy": policy_field(current.policy)})

    async def detach(self, netns: str) -> None:
        """Forget the slot (its connections close); safe to repeat."""
        async with self._lock:
            if self._slots.pop(netns, None) is None:
                return
            with contextlib.suppress(NotFound):
                await self._request("detach", {"netns": netns})

    async def stats(self) -> Message:
        """The egress process's own figures (slots, connections, its RSS)."""
        async with self._lock:  # never a child half-way through its re-attaches
            if self._channel is None:
                raise ChannelClosed("the egress process is not running")
            return await self._channel.request("stats")

    async def _attach(self, netns: str, attachment: _Attachment) -> None:
        listeners = await self._listen(netns, self._settings.ports)
        try:
            await self._request("attach", {"netns": netns, "owner_key_id": attachment.owner_key_id,
                                           "policy": policy_field(attachment.policy)},
                                listeners.fds())
        finally:
            listeners.close()

    async def _request(self, op: str, body: Message, fds: Sequence[int] = ()) -> None:
        channel = self._channel
        if channel is None or channel.closed:
            # Applied from the desired state when the next child starts.
            log.warning("egress process down, request deferred", extra={"op": op})
            return
        try:
            await channel.request(op, body, fds)
        except ChannelClosed:
            log.warning("egress process went away during a request", extra={"op": op})

    async def _spawn(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            uid = self._uid()
            self._process = await asyncio.create_subprocess_exec(
                *self._command(child.fileno(), uid), pass_fds=(child.fileno(),),
                stdin=asyncio.subprocess.DEVNULL, cwd="/", env=_child_env(uid))
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        channel = self._channel = Channel(parent, self._serve)
        # Held here: the loop keeps only weak references to tasks.
        self._reader = asyncio.get_running_loop().create_task(channel.run())
        self._reader.add_done_callback(_log_reader_end)
        try:
            await asyncio.wait_for(channel.request("configure", self._configure.to_message()),
                                   CONFIGURE_TIMEOUT_S)
        except TimeoutError as exc:
            raise Unavailable("the egress process did not answer its configure") from exc
        for netns, attachment in list(self._slots.items()):
            try:
                await self._attach(netns, attachment)
            except (AenvError, OSError) as err:
                # The slot went while the child was down (its destroy detaches it too).
                log.warning("egress slot not re-attached", extra={"netns": netns,
                                                                  "error": str(err)})
                self._slots.pop(netns, None)
        log.info("egress process started", extra={"pid": self._process.pid,
                                                   "slots": len(self._slots)})

    def _command(self, fd: int, uid: int | None) -> list[str]:
        base = list(self._settings.command) or [sys.executable, "-m", EGRESS_MODULE]
        drop = ["--uid", str(uid)] if uid is not None else []
        return [*base, "--control-fd", str(fd), "--parent-pid", str(os.getpid()), *drop]

    def _uid(self) -> int | None:
        """The child's uid; None (the agent's own) when there is none or the agent is not root."""
        return self._settings.uid if os.geteuid() == 0 else None

    async def _watch(self) -> None:
        """Restart the child whenever it ends, with back-off."""
        backoff = BACKOFF_FIRST_S
        while not self._stopping:
            process = self._process
            started = time.monotonic()
            if process is not None:
                code = await process.wait()
                log.error("egress process ended, restarting",
                          extra={"pid": process.pid, "returncode": code, "slots": len(self._slots)})
            if time.monotonic() - started > STABLE_AFTER_S:
                backoff = BACKOFF_FIRST_S
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)
            async with self._lock:
                await self._end_child()
                try:
                    await self._spawn()
                    self.restarts += 1
                except (AenvError, OSError) as err:
                    log.error("egress process restart failed", extra={"error": str(err)})
                    await self._end_child()

    async def _end_child(self) -> None:
        if self._channel is not None:
            await self._channel.aclose()
            self._channel = None
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), STOP_GRACE_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

    async def _serve(self, op: str, body: Message, fds: list[int]) -> Message | None:
        for fd in fds:  # the egress process never sends descriptors
            os.close(fd)
        if op != "resolved":
            raise InvalidArgument(f"unknown egress request {op!r}")
        netns = netns_of(body)
        if netns not in self._slots:
            raise NotFound(f"egress of {netns} is not attached")
        try:
            addresses = [str(ip_address(a)) for a in body.get("addresses", [])]
            ttl_s = float(body["ttl_s"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgument(f"bad resolved message: {exc}") from exc
        await self._on_resolved(netns, addresses, ttl_s)
        return None


def _child_env(uid: int | None) -> dict[str, str]:
    """The agent's environment minus what would point an unprivileged child at root's files."""
    env = {k: v for k, v in os.environ.items() if k.startswith(("AENV_", "PYTHON", "PATH", "LANG"))}
    if uid is not None:
        env["HOME"] = "/nonexistent"
    return env


def _log_reader_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (err := task.exception()) is not None:
        log.error("egress control channel failed", extra={"error": repr(err)})


__all__ = ["EgressSupervisor", "ResolvedSink", "SupervisorSettings"]
