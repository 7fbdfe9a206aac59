"""Work an operation leaves running after it returns, one task per sandbox, that later
operations on the sandbox wait for: a paused VM's quit, a layer compaction."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine


class SandboxTasks:
    """At most one task of a kind per sandbox."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, sandbox_id: str, work: Coroutine[None, None, None]) -> None:
        """Run `work` for the sandbox, unless a task runs for it already."""
        if sandbox_id in self._tasks:
            work.close()
            return
        task = asyncio.ensure_future(work)
        self._tasks[sandbox_id] = task
        task.add_done_callback(
            lambda _: self._tasks.pop(sandbox_id) if self._tasks.get(sandbox_id) is task else None)

    def running(self, sandbox_id: str) -> bool:
        return sandbox_id in self._tasks

    async def done(self, sandbox_id: str) -> None:
        """Wait for the sandbox's task, if one runs (its failure is its own to report)."""
        if task := self._tasks.get(sandbox_id):
            await asyncio.gather(asyncio.shield(task), return_exceptions=True)

    async def all_done(self) -> None:
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def cancel_all(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        await self.all_done()
