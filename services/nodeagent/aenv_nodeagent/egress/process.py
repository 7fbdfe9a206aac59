"""The egress process's state: what ``configure`` set up node-wide and one proxy plus one
resolver per attached slot, driven by the agent's requests on the control channel.

``attach`` brings a slot's three listeners (TCP proxy, UDP and TCP DNS) and its policy: the
proxy (proxy.py) and the resolver (dns.py) start serving them, sharing the slot's
``ResolvedNames`` so a connection is judged by what this slot's resolver answered. ``update``
swaps the policy for new connections and queries (open ones keep going); ``detach`` closes the
listeners and every connection of the slot. Secret values come from etcd through
``SecretValues`` (watched, so a destroyed secret stops being filled at once), bound per slot
to the sandbox's owner key.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import ClusterStore
from aenv_common.config import CommonSettings
from aenv_common.egress import EgressRules
from aenv_common.errors import Conflict, InvalidArgument, NotFound
from aenv_common.secrets.sealing import SecretsKey
from aenv_common.secrets.values import SecretValues

from .certs import EgressCA
from .control import Channel, Configure, Message, close_fds, netns_of, policy_bytes
from .dialers import Blocked, blocked_by, dialer_for
from .dns import SlotResolver, resolve, servers_for
from .intercept import Interceptor
from .proxy import NodeParts, ProxyLimits, Route, SlotProxy
from .resolved import IPAddress, ResolvedNames
from .transforms import SecretLookup

log = logging.getLogger(__name__)

LISTENERS_PER_SLOT = 3


@dataclass
class _Node:
    """What ``configure`` set up."""

    key: SecretsKey
    blocked: Blocked
    upstreams: list[str]
    parts: NodeParts
    secrets: SecretValues | None
    store: ClusterStore | None


@dataclass
class _Slot:
    owner_key_id: str
    proxy: SlotProxy
    resolver: SlotResolver

    async def stop(self) -> None:
        await self.proxy.stop()
        await self.resolver.stop()


class EgressProcess:
    def __init__(self) -> None:
        self._node: _Node | None = None
        self._slots: dict[str, _Slot] = {}
        self.channel: Channel | None = None  # set by __main__, for `resolved` reports

    async def handle(self, op: str, body: Message, fds: list[int]) -> Message | None:
        """Serve one request of the agent (the control channel's handler)."""
        if op == "attach":
            await self._attach_request(body, fds)
        elif fds:
            close_fds(fds)
            raise InvalidArgument(f"{op} carries no descriptors")
        elif op == "configure":
            await self._configure(Configure.from_message(body))
        elif op == "update":
            self._update(netns_of(body), _rules(body))
        elif op == "detach":
            await self._detach(netns_of(body))
        elif op == "stats":
            return self.stats()
        else:
            raise InvalidArgument(f"unknown egress request {op!r}")
        return None

    def stats(self) -> Message:
        return {"slots": len(self._slots),
                "connections": sum(s.proxy.connections for s in self._slots.values()),
                "rss_kib": _rss_kib()}

    async def close(self) -> None:
        for netns in list(self._slots):
            await self._detach(netns)
        node, self._node = self._node, None
        if node is not None:
            await _close_node(node)

    async def _configure(self, config: Configure) -> None:
        if self._node is not None:
            raise Conflict("the egress process is configured already")
        blocked = blocked_by(config.blocked_extra)
        ca = EgressCA.from_pem(config.ca_cert_pem.encode(), config.ca_key_pem.encode())
        interceptor = Interceptor(ca, config.upstream_ca_file,
                                  idle_timeout_s=config.idle_timeout_s)
        key = SecretsKey(config.secrets_key)
        store, secrets = await _secret_values(config, key)
        limits = ProxyLimits(max_connections=config.max_connections_per_sandbox,
                             idle_timeout_s=config.idle_timeout_s,
                             peek_timeout_s=config.peek_timeout_s,
                             name_wait_s=config.name_wait_s)
        self._node = _Node(key, blocked, list(config.dns_upstreams),
                           NodeParts(blocked, resolve, interceptor.intercept, limits),
                           secrets, store)
        log.info("egress process configured", extra={
            "dns_upstreams": config.dns_upstreams, "blocked_extra": len(config.blocked_extra),
            "etcd_watch": secrets is not None, "ca": ca.fingerprint})

    async def _attach_request(self, body: Message, fds: list[int]) -> None:
        if len(fds) != LISTENERS_PER_SLOT:
            close_fds(fds)
            raise InvalidArgument(f"attach needs {LISTENERS_PER_SLOT} listeners")
        sockets = [socket.socket(fileno=fd) for fd in fds]
        try:
            await self._attach(netns_of(body), str(body.get("owner_key_id", "")), _rules(body),
                               sockets)
        except BaseException:
            for sock in sockets:
                sock.close()
            raise

    async def _attach(self, netns: str, owner_key_id: str, rules: EgressRules,
                      sockets: Sequence[socket.socket]) -> None:
        node = self._configured()
        if netns in self._slots:  # re-attached (fresh listeners): the old ones go
            await self._detach(netns)
        proxy_sock, udp_sock, tcp_sock = sockets
        resolved = ResolvedNames()
        proxy = SlotProxy(netns, self._route(node, rules), resolved,
                          _secret_lookup(node.secrets, owner_key_id), node.parts)
        resolver = SlotResolver(netns, rules, resolved, node.upstreams, self._report)
        slot = _Slot(owner_key_id, proxy, resolver)
        try:
            await proxy.start(proxy_sock)
            await resolver.start(udp_sock, tcp_sock)
        except BaseException:
            await slot.stop()
            raise
        self._slots[netns] = slot
        log.info("egress slot attached", extra={"netns": netns, "slots": len(self._slots)})

    def _update(self, netns: str, rules: EgressRules) -> None:
        slot = self._slots.get(netns)
        if slot is None:
            raise NotFound(f"egress of {netns} is not attached")
        slot.proxy.route = self._route(self._configured(), rules)
        slot.resolver.update(rules)
        log.info("egress slot policy updated", extra={"netns": netns})

    async def _detach(self, netns: str) -> None:
        slot = self._slots.pop(netns, None)
        if slot is None:
            raise NotFound(f"egress of {netns} is not attached")
        await slot.stop()
        log.info("egress slot detached", extra={"netns": netns, "slots": len(self._slots)})

    def _route(self, node: _Node, rules: EgressRules) -> Route:
        dialer = dialer_for(rules, node.key, blocked=node.blocked)
        return Route(rules, dialer, servers_for(rules, node.upstreams))

    async def _report(self, netns: str, addresses: list[IPAddress], ttl_s: float) -> None:
        if self.channel is None:
            return
        await self.channel.request("resolved", {
            "netns": netns, "addresses": [str(a) for a in addresses], "ttl_s": ttl_s})

    def _configured(self) -> _Node:
        if self._node is None:
            raise Conflict("the egress process is not configured yet")
        return self._node


def _rules(body: Message) -> EgressRules:
    policy = cluster_pb2.NetworkPolicy()
    try:
        policy.ParseFromString(policy_bytes(body))
    except Exception as exc:  # protobuf's DecodeError
        raise InvalidArgument("attach/update with an unreadable policy") from exc
    return EgressRules.from_proto(policy)


def _secret_lookup(secrets: SecretValues | None, owner_key_id: str) -> SecretLookup:
    if secrets is None or not owner_key_id:
        return lambda _name: None
    return lambda name: secrets.value(owner_key_id, name)


async def _secret_values(
    config: Configure, key: SecretsKey
) -> tuple[ClusterStore | None, SecretValues | None]:
    """The watched secret values; none without etcd endpoints (tests of the data plane)."""
    if not config.etcd_endpoints:
        return None, None
    store = await ClusterStore.connect(CommonSettings(
        etcd_endpoints=config.etcd_endpoints, etcd_prefix=config.etcd_prefix))
    secrets = SecretValues(store, key)
    try:
        await secrets.start()
    except BaseException:
        await store.close()
        raise
    return store, secrets


async def _close_node(node: _Node) -> None:
    if node.secrets is not None:
        await node.secrets.stop()
    if node.store is not None:
        await node.store.close()


def _rss_kib() -> int:
    with contextlib.suppress(OSError), open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0

