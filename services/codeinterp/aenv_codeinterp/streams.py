"""The stdout and stderr of a kernel process (Node.js, bash) as stream lines of the running
execution, each ended by a marker the process writes after the cell: `\\x1e<id>[ <status>]`.
A cell's end waits for both markers, so no output arrives after its end of execution.
"""

from __future__ import annotations

import asyncio
import contextlib

from . import outputs
from .kernel import OutputQueue

MARK = "\x1e"


class MarkedStreams:
    def __init__(self, stdout: asyncio.StreamReader, stderr: asyncio.StreamReader) -> None:
        self._queue: OutputQueue | None = None
        self._id = ""
        self._marked: dict[str, asyncio.Event] = {}
        self.status = ""  # what followed the id in stdout's marker
        self._readers = [asyncio.create_task(self._read("stdout", stdout)),
                         asyncio.create_task(self._read("stderr", stderr))]

    def begin(self, execution_id: str, queue: OutputQueue | None) -> None:
        """Lines go to `queue` (None: dropped, for quiet code) until both markers are seen."""
        self._queue, self._id, self.status = queue, execution_id, ""
        self._marked = {"stdout": asyncio.Event(), "stderr": asyncio.Event()}

    async def ended(self) -> None:
        await asyncio.gather(*(event.wait() for event in self._marked.values()))
        self._queue = None

    async def _read(self, name: str, reader: asyncio.StreamReader) -> None:
        while raw := await reader.readline():
            text = raw.decode(errors="replace")
            before, mark, after = text.partition(MARK)
            if before and self._queue is not None:
                await self._queue.put(outputs.stream(name, before))
            if mark:
                marked_id, _, status = after.strip().partition(" ")
                if marked_id == self._id and name in self._marked:
                    if name == "stdout":
                        self.status = status
                    self._marked[name].set()
        for event in self._marked.values():  # the process is gone: nothing more will come
            event.set()

    async def close(self) -> None:
        for task in self._readers:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
