"""``python -m aenv_nodeagent.egress --control-fd N --parent-pid P``: the egress process.

Started by the node agent's supervisor (supervisor.py) as an unprivileged uid. Before it reads
anything it asks the kernel to kill it when the agent dies (PR_SET_PDEATHSIG; checked against
the race of an agent that died before the call) and forbids itself new privileges
(PR_SET_NO_NEW_PRIVS), then serves the control channel until the agent closes it.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import signal
import socket
import sys

from aenv_common.config import CommonSettings
from aenv_common.logging import setup_logging

from .control import Channel
from .process import EgressProcess

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38


def _bind_to_parent(parent_pid: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if os.getppid() != parent_pid:  # the agent died before the death signal was armed
        sys.exit(1)


async def _serve(control_fd: int) -> None:
    process = EgressProcess()
    channel = process.channel = Channel(socket.socket(fileno=control_fd), process.handle)
    try:
        await channel.run()
    finally:
        await process.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="aenv_nodeagent.egress")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    args = parser.parse_args()
    _bind_to_parent(args.parent_pid)
    common = CommonSettings()
    setup_logging("egress", common.log_level, common.log_json)
    asyncio.run(_serve(args.control_fd))


if __name__ == "__main__":
    main()
