"""Entry point of the etcd cluster-state layer; the code lives in `aenv_common.cluster`."""

from aenv_common.cluster import (
    NODES,
    SANDBOXES,
    SNAPSHOTS,
    TEMPLATES,
    ClusterStore,
    EtcdKeys,
    LeaderElection,
    NodeRegistration,
    RecordCache,
    Versioned,
    mark_lost_sandboxes,
)

__all__ = [
    "NODES",
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
