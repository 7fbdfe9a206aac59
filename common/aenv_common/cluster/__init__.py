"""Cluster state in etcd: key layout, typed store, watched caches, node registration, leader
election and the lost-sandbox sweep."""

from aenv_common.cluster.cache import RecordCache
from aenv_common.cluster.keys import (
    NODES,
    RETIRED_TEMPLATES,
    SANDBOXES,
    SNAPSHOTS,
    TEMPLATES,
    EtcdKeys,
)
from aenv_common.cluster.leader import LeaderElection
from aenv_common.cluster.lost import mark_lost_sandboxes
from aenv_common.cluster.registration import NodeRegistration
from aenv_common.cluster.store import ClusterStore, Versioned

__all__ = [
    "NODES",
    "RETIRED_TEMPLATES",
    "SANDBOXES",
    "SNAPSHOTS",
    "TEMPLATES",
    "ClusterStore",
    "EtcdKeys",
    "LeaderElection",
    "NodeRegistration",
    "RecordCache",
    "Versioned",
    "mark_lost_sandboxes",
]
