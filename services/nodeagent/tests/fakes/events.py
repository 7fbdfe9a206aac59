"""SandboxEvents over fakes: events on, each write kept in memory instead of etcd, failures
injectable like RecordingRecords'."""

from __future__ import annotations

from typing import Any, cast

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.events import EventLog
from aenv_nodeagent.sandbox.events import SandboxEvents, Subject
from aenv_nodeagent.sandbox.records import SandboxRecords


class RecordingEvents(SandboxEvents):
    """Keeps every event in `events` (in write order) and certificates in `deaths`. Errors
    queued on `write_failures` fail the next event-only writes (announce, died); a publish
    fails as the record's put does (its record and event are one transaction)."""

    def __init__(self, records: SandboxRecords, node_id: str) -> None:
        # The log is never reached: the three writes below are the only ones that would.
        super().__init__(records, node_id, cast(EventLog, object()))
        self.events: list[c.SandboxEvent] = []
        self.deaths: dict[str, c.DeathCertificate] = {}
        self.withdrawn: list[str] = []  # certificates deleted by a publish of one back
        self.write_failures: list[BaseException] = []

    def of(self, sandbox_id: str) -> list[c.SandboxEvent]:
        """The sandbox's events, in event id order (as etcd lists them)."""
        return sorted((e for e in self.events if e.sandbox_id == sandbox_id),
                      key=lambda e: e.event_id)

    def types(self, sandbox_id: str) -> list[c.SandboxEventType]:
        return [e.type for e in self.of(sandbox_id)]

    async def operations(
        self, subject: Subject, type_: c.SandboxEventType, *, detail: str = "",
        related: Any = (),
    ) -> list[Any]:
        return []

    async def _write(self, event: c.SandboxEvent) -> None:
        if self.write_failures:
            raise self.write_failures.pop(0)
        self.events.append(event)

    async def _write_death(self, event: c.SandboxEvent, certificate: c.DeathCertificate) -> None:
        await self._write(event)
        certificate.event_id = event.event_id
        self.deaths[certificate.sandbox_id] = certificate

    async def _write_with_record(
        self, event: c.SandboxEvent, record: c.SandboxRecord, *, revived: bool
    ) -> None:
        await self._records.put_sandbox(record)
        if revived and self.deaths.pop(record.sandbox_id, None) is not None:
            self.withdrawn.append(record.sandbox_id)
        self.events.append(event)
