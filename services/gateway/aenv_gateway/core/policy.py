"""The limits and defaults both edges apply, each written once: whatever the protocol, a request
that leaves a field out gets the same sandbox."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from aenv.cluster.v1 import cluster_pb2

# Fork children's time to live when the request leaves it out (the E2B SDK's default too).
FORK_DEFAULT_TIMEOUT_S = 15

# The most items one page of a listing holds (sandboxes, snapshots, templates).
MAX_PAGE = 100

V = TypeVar("V")


def default_network() -> cluster_pb2.NetworkPolicy:
    """A sandbox's network when the request says nothing of it: the internet open."""
    return cluster_pb2.NetworkPolicy(allow_internet_access=True)


def item_over_shared(shared: Mapping[str, V], item: Mapping[str, V]) -> dict[str, V]:
    """A batch item's map field (metadata, env vars) over the batch's shared one, key by key:
    the item adds keys and overrides the shared values it names."""
    return {**shared, **item}
