"""Event ids, and the words events and causes are known by on the wire."""

from __future__ import annotations

import os
import time

from aenv.cluster.v1 import cluster_pb2 as c

# The native API's names (lowercase, as in the REST API and aenv's CLI).
TYPE_NAMES: dict[int, str] = {
    c.SANDBOX_EVENT_TYPE_CREATED: "created",
    c.SANDBOX_EVENT_TYPE_READY: "ready",
    c.SANDBOX_EVENT_TYPE_PAUSED: "paused",
    c.SANDBOX_EVENT_TYPE_RESUMED: "resumed",
    c.SANDBOX_EVENT_TYPE_SNAPSHOTTED: "snapshotted",
    c.SANDBOX_EVENT_TYPE_FORKED: "forked",
    c.SANDBOX_EVENT_TYPE_KILLED: "killed",
    c.SANDBOX_EVENT_TYPE_TIMED_OUT: "timed_out",
    c.SANDBOX_EVENT_TYPE_LOST: "lost",
    c.SANDBOX_EVENT_TYPE_DIED: "died",
    c.SANDBOX_EVENT_TYPE_UPDATED: "updated",
}

CAUSE_NAMES: dict[int, str] = {
    c.DEATH_CAUSE_GUEST_OOM: "guest_oom",
    c.DEATH_CAUSE_GUEST_CRASH: "guest_crash",
    c.DEATH_CAUSE_GUEST_HANG: "guest_hang",
    c.DEATH_CAUSE_VMM_CRASH: "vmm_crash",
    c.DEATH_CAUSE_NODE_LOST: "node_lost",
    c.DEATH_CAUSE_EVICTED_MEMORY_PRESSURE: "evicted_memory_pressure",
    c.DEATH_CAUSE_DISK_FULL: "disk_full",
    c.DEATH_CAUSE_ADMIN_KILL: "admin_kill",
    c.DEATH_CAUSE_LEASE_EXPIRED: "lease_expired",
}

# E2B's lifecycle event types (its events API and webhooks), by the native type they stand for.
# E2B has no word for a death: it is killed there, with aenv's cause beside. A loss is not: a
# lost sandbox may come back with its node, and E2B's killed is final. Ready and forked have no
# E2B name either; those three are served on aenv's own routes only.
E2B_EVENT_TYPES: dict[int, str] = {
    c.SANDBOX_EVENT_TYPE_CREATED: "sandbox.lifecycle.created",
    c.SANDBOX_EVENT_TYPE_PAUSED: "sandbox.lifecycle.paused",
    c.SANDBOX_EVENT_TYPE_RESUMED: "sandbox.lifecycle.resumed",
    c.SANDBOX_EVENT_TYPE_SNAPSHOTTED: "sandbox.lifecycle.checkpointed",
    c.SANDBOX_EVENT_TYPE_KILLED: "sandbox.lifecycle.killed",
    c.SANDBOX_EVENT_TYPE_TIMED_OUT: "sandbox.lifecycle.killed",
    c.SANDBOX_EVENT_TYPE_DIED: "sandbox.lifecycle.killed",
    c.SANDBOX_EVENT_TYPE_UPDATED: "sandbox.lifecycle.updated",
}


E2B_NAMES = frozenset(E2B_EVENT_TYPES.values())
# The detail a node gives a timeout that paused its sandbox (the wing's expiry).
TIMED_OUT_PAUSED = "paused"


def e2b_event_type(event: c.SandboxEvent) -> str | None:
    """E2B's name for an event; None for one E2B has no word for (ready, forked, lost). A timeout
    that paused its sandbox (auto-pause) is E2B's pause: the sandbox lives on, and a receiver told
    "killed" would forget it."""
    if event.type == c.SANDBOX_EVENT_TYPE_TIMED_OUT and event.detail == TIMED_OUT_PAUSED:
        return "sandbox.lifecycle.paused"
    return E2B_EVENT_TYPES.get(event.type)


def new_event_id(now_ns: int | None = None) -> str:
    """Sortable by time as a string: 20 digits of Unix nanoseconds, then 8 random hex digits."""
    stamp = time.time_ns() if now_ns is None else now_ns
    return f"{stamp:020d}-{os.urandom(4).hex()}"


def cause_name(cause: int) -> str:
    return CAUSE_NAMES.get(cause, "unknown")


def death_message(certificate: c.DeathCertificate) -> str:
    """What every later call naming a dead sandbox answers (the SDKs show it as the error)."""
    words = f"sandbox {certificate.sandbox_id} died: {cause_name(certificate.cause)}"
    return f"{words} ({certificate.detail})" if certificate.detail else words
