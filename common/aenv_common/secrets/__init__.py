"""The Secret API's data: the platform key and sealing (sealing.py), name and size rules
(rules.py), the records in etcd for the gateway (store.py) and the opened values a node fills
placeholders from (values.py). docs/architecture.md, "Secrets"."""

from aenv_common.secrets.records import (
    EtcdSecretRecords,
    InMemorySecretRecords,
    SecretRecords,
)
from aenv_common.secrets.sealing import (
    SealBroken,
    SecretsKey,
    create_key_file,
    load_key,
    open_sealed,
    seal,
)
from aenv_common.secrets.store import SecretStore
from aenv_common.secrets.values import SecretValues

__all__ = [
    "EtcdSecretRecords",
    "InMemorySecretRecords",
    "SealBroken",
    "SecretRecords",
    "SecretStore",
    "SecretValues",
    "SecretsKey",
    "create_key_file",
    "load_key",
    "open_sealed",
    "seal",
]
