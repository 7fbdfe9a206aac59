"""Experiment leases (docs/leases.md): records in etcd bound to etcd leases, and the API's
operations on them."""

from aenv_gateway.core.leases.operations import Leases, LeaseView
from aenv_gateway.core.leases.records import EtcdLeaseStore, InMemoryLeaseStore, LeaseStore

__all__ = ["EtcdLeaseStore", "InMemoryLeaseStore", "LeaseStore", "LeaseView", "Leases"]
