"""uvicorn's server without its tick: an idle guest's envd sleeps until a request or a signal.

uvicorn's `Server.main_loop` wakes ten times a second to see whether a signal asked it to stop
(and to refresh its Date header, which envd does not send). Every such wake-up of an idle guest
is emulated on its host's CPU under TCG; a host holding hundreds of idle sandboxes pays for all
of them. Here the loop waits on an event the signal handler sets instead.
"""

from __future__ import annotations

import asyncio
from types import FrameType

import uvicorn


class QuietServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._asked = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        # on_tick(0) does what uvicorn's every tick does (headers, the request limit) and says
        # whether to stop; envd sets no request limit, so only handle_exit changes its answer.
        while not await self.on_tick(0):
            await self._asked.wait()
            self._asked.clear()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        # A signal handler runs between the loop's steps (its epoll wait interrupted and
        # retried): call_soon_threadsafe writes the loop's wake-up pipe, so it returns.
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._asked.set)
