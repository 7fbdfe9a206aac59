"""Death certificates in every answer: a call naming a sandbox that died (its owner's kill and
its timeout aside) is answered with why, never a bare "not found".

`Deaths.explain` is the one lookup: every edge that answers NotFound for a sandbox id passes the
error through it (REST routes naming {sandboxID}, the gRPC methods naming a sandbox, the data
plane). It reads the certificate of a lost sandbox from its record (`SandboxRecord.death`, set by
the scheduler's sweep) and any other from etcd (`deaths/<id>`); an etcd that does not answer
(or an id no record can have) leaves the plain NotFound.
"""

from __future__ import annotations

import logging

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.errors import AenvError, NotFound
from aenv_common.events import cause_name, death_message
from aenv_gateway.cluster.directory import SandboxDirectory
from aenv_gateway.core.events.store import EventStore

log = logging.getLogger(__name__)

# The trailing metadata of a gRPC NOT_FOUND for a dead sandbox (clients/python errors.py).
DEATH_CAUSE_METADATA = "aenv-death-cause"
DEATH_DETAIL_METADATA = "aenv-death-detail"


class SandboxDied(NotFound):
    """NotFound for a sandbox that died, carrying its certificate: REST 404 with the
    certificate's words, gRPC NOT_FOUND with them and the cause as trailing metadata."""

    def __init__(self, certificate: c.DeathCertificate) -> None:
        super().__init__(death_message(certificate))
        self.certificate = certificate

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        detail = self.certificate.detail.encode("ascii", "replace").decode()
        printable = "".join(ch if " " <= ch <= "~" else "?" for ch in detail)
        return ((DEATH_CAUSE_METADATA, cause_name(self.certificate.cause)),
                (DEATH_DETAIL_METADATA, printable))


class Deaths:
    def __init__(self, store: EventStore, directory: SandboxDirectory) -> None:
        self._store = store
        self._directory = directory

    async def certificate(self, sandbox_id: str) -> c.DeathCertificate | None:
        """The sandbox's certificate while retained; None if it has none (alive, killed by its
        owner or its timeout, unknown) or etcd did not answer."""
        located = self._directory.find(sandbox_id)
        record = located.record if located else self._directory.orphan(sandbox_id)
        if (record is not None and record.state == c.SANDBOX_STATE_LOST
                and record.HasField("death")):
            return record.death
        try:
            return await self._store.death(sandbox_id)
        except AenvError as err:  # etcd down, or an id no key can name
            log.warning("death certificate unreadable",
                        extra={"sandbox_id": sandbox_id, "error": err.message})
            return None

    async def explain(self, sandbox_id: str, err: AenvError) -> AenvError:
        """`err`, or SandboxDied when it is a NotFound and the sandbox has a certificate."""
        if not isinstance(err, NotFound) or isinstance(err, SandboxDied) or not sandbox_id:
            return err
        certificate = await self.certificate(sandbox_id)
        return err if certificate is None else SandboxDied(certificate)
