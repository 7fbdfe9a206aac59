"""A stand-in egress process for the supervisor's tests: speaks the control channel, keeps
which slots are attached and refuses an attach before ``configure``, as the real one does."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket

from aenv_common.errors import Conflict, NotFound
from aenv_nodeagent.egress.control import Channel, Message, close_fds, netns_of


class Fake:
    def __init__(self) -> None:
        self.configured = False
        self.slots: dict[str, str] = {}

    async def handle(self, op: str, body: Message, fds: list[int]) -> Message | None:
        close_fds(fds)
        if op == "configure":
            self.configured = True
        elif op == "attach":
            if not self.configured:
                raise Conflict("not configured")
            self.slots[netns_of(body)] = str(body["policy"])
        elif op == "update":
            if netns_of(body) not in self.slots:
                raise NotFound("not attached")
            self.slots[netns_of(body)] = str(body["policy"])
        elif op == "detach":
            self.slots.pop(netns_of(body), None)
        elif op == "stats":
            return {"slots": sorted(self.slots), "pid": os.getpid(), "fds": len(fds)}
        return None


async def main(fd: int) -> None:
    await Channel(socket.socket(fileno=fd), Fake().handle).run()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--control-fd", type=int)
    parser.add_argument("--parent-pid", type=int)
    parser.add_argument("--uid", type=int)
    asyncio.run(main(parser.parse_args().control_fd))
