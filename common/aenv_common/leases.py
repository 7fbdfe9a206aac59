"""Experiment leases: what the gateway that keeps them and the node agents that reap under them
agree on (docs/leases.md).

A lease is `leases/<lease id>` (a `LeaseRecord`) bound to an etcd lease of its ttl: the holder's
renewal is one etcd keep-alive, and the key vanishing (expiry or release) is the lease lapsing.
Sandboxes name their lease in `SandboxRecord.lease_id`; every node agent ends its own when their
lease's key is gone.
"""

from __future__ import annotations

import re
import secrets
import string

from aenv.cluster.v1 import cluster_pb2

# The etcd record kind: `<prefix>/leases/<lease id>`.
LEASES = "leases"

# How E2B's SDKs (which have no lease field) name a sandbox's lease: in its metadata.
LEASE_METADATA_KEY = "aenv.lease"

# A lease lives this long without a renewal (ttl_seconds).
MIN_TTL_S = 5
MAX_TTL_S = 3600

_ALPHABET = string.ascii_lowercase + string.digits
LEASE_ID_RE = re.compile(r"^lease-[a-z0-9]{1,64}$")

KILL = cluster_pb2.LEASE_EXPIRY_ACTION_KILL
PAUSE = cluster_pb2.LEASE_EXPIRY_ACTION_PAUSE


def new_lease_id() -> str:
    """`lease-` and 20 random characters (103 bits: not guessable, so not enumerable)."""
    return "lease-" + "".join(secrets.choice(_ALPHABET) for _ in range(20))


def is_lease_id(value: str) -> bool:
    return bool(LEASE_ID_RE.match(value))


def expiry_action(action: int) -> cluster_pb2.LeaseExpiryAction:
    """The action a lease's `on_expiry` means: PAUSE, else KILL (unspecified is kill)."""
    return PAUSE if action == PAUSE else KILL
