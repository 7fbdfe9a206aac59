"""In-memory cluster records that keep the history of sandbox puts and can be told to fail."""

from __future__ import annotations

from aenv.cluster.v1 import cluster_pb2
from aenv_testing.records import MemoryRecords


class RecordingRecords(MemoryRecords):
    """MemoryRecords whose `put_sandbox` logs (id, state) in `puts`; errors queued on
    `put_failures` (`delete_failures`) fail the next puts (deletes) of sandbox records before
    they change anything."""

    def __init__(self) -> None:
        super().__init__()
        self.puts: list[tuple[str, cluster_pb2.SandboxState]] = []
        self.put_failures: list[BaseException] = []
        self.delete_failures: list[BaseException] = []

    async def put_sandbox(self, rec: cluster_pb2.SandboxRecord) -> int:
        if self.put_failures:
            raise self.put_failures.pop(0)
        self.puts.append((rec.sandbox_id, rec.state))
        return await super().put_sandbox(rec)

    async def delete_sandbox(self, sandbox_id: str) -> None:
        if self.delete_failures:
            raise self.delete_failures.pop(0)
        await super().delete_sandbox(sandbox_id)

    def states(self, sandbox_id: str) -> list[cluster_pb2.SandboxState]:
        """The states the sandbox's record was published with, oldest first."""
        return [state for sid, state in self.puts if sid == sandbox_id]
