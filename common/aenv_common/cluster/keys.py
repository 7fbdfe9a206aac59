"""Key layout of the cluster state in etcd (docs/architecture.md, "Cluster state").

Everything lives under one configurable prefix (default `/aenv/v1`) so several installs or test
runs can share one etcd: `<prefix>/nodes/<id>`, `<prefix>/sandboxes/<id>`,
`<prefix>/templates/<id>`, `<prefix>/snapshots/<id>` and `<prefix>/scheduler/leader`.
Secrets are kept per API key: `<prefix>/secrets/<owner key id>/<secret id>`, and their names,
unique per key, claimed under `<prefix>/secret-names/<owner key id>/<digest of the name>`.
"""

from __future__ import annotations

from dataclasses import dataclass

from aenv_common import errors

NODES = "nodes"
SANDBOXES = "sandboxes"
TEMPLATES = "templates"
SNAPSHOTS = "snapshots"
# Node-side templates the catalog no longer uses (written by the gateway that deleted the last
# build using one): nodes drop their copies. Positive evidence, unlike a missing record, which a
# node sharing its folders with another cluster's would also see.
RETIRED_TEMPLATES = "retired-templates"
# A watch of `collection(SECRETS)` sees every key's secrets; `RecordCache` ids are then
# "<owner>/<secret id>".
SECRETS = "secrets"
SECRET_NAMES = "secret-names"


def _check_id(kind: str, record_id: str) -> str:
    # A '/' would let one id address another record's key (or a whole sub-tree).
    if not record_id or "/" in record_id:
        raise errors.InvalidArgument(f"invalid {kind} id {record_id!r}")
    return record_id


@dataclass(frozen=True)
class EtcdKeys:
    prefix: str = "/aenv/v1"

    def __post_init__(self) -> None:
        if not self.prefix.startswith("/") or self.prefix.endswith("/"):
            raise errors.InvalidArgument(
                f"etcd prefix must start with '/' and not end with '/': {self.prefix!r}"
            )

    def collection(self, kind: str) -> bytes:
        """The prefix of every key of one record kind, with its trailing slash."""
        return f"{self.prefix}/{kind}/".encode()

    def record(self, kind: str, record_id: str) -> bytes:
        return self.collection(kind) + _check_id(kind, record_id).encode()

    def node(self, node_id: str) -> bytes:
        return self.record(NODES, node_id)

    def sandbox(self, sandbox_id: str) -> bytes:
        return self.record(SANDBOXES, sandbox_id)

    def template(self, template_id: str) -> bytes:
        return self.record(TEMPLATES, template_id)

    def snapshot(self, snapshot_id: str) -> bytes:
        return self.record(SNAPSHOTS, snapshot_id)

    def secret(self, owner_key_id: str, secret_id: str) -> bytes:
        return self.owner_secrets(owner_key_id) + _check_id(SECRETS, secret_id).encode()

    def owner_secrets(self, owner_key_id: str) -> bytes:
        """The prefix of one API key's secrets, with its trailing slash."""
        return self.record(SECRETS, owner_key_id) + b"/"

    def secret_name(self, owner_key_id: str, name_digest: str) -> bytes:
        """The claim of a secret name (by digest: a name may hold any character, '/' too)."""
        return (self.record(SECRET_NAMES, owner_key_id) + b"/"
                + _check_id(SECRET_NAMES, name_digest).encode())

    @property
    def scheduler_leader(self) -> bytes:
        return f"{self.prefix}/scheduler/leader".encode()

    def id_from_key(self, kind: str, key: bytes) -> str:
        """The record id of a key inside `collection(kind)`."""
        base = self.collection(kind)
        if not key.startswith(base):
            raise errors.InvalidArgument(f"key {key!r} is not under {base!r}")
        return key[len(base) :].decode()
