"""``python -m aenv_nodeagent.egress --control-fd N --parent-pid P [--uid U]``: the egress
process, started by the node agent's supervisor (supervisor.py).

Before it reads anything from the agent it loads every module it will need, then becomes ``U``
(groups dropped, gid = uid; leaving root clears all capabilities, which is checked), asks the
kernel to kill it when the agent dies (PR_SET_PDEATHSIG, armed after the uid change, which
would clear it; checked against an agent that died first) and forbids itself new privileges.
Loading first matters: the interpreter's own files may be where ``U`` cannot read them.
Then it serves the control channel until the agent closes it.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import importlib
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
_LATE_IMPORTS = ("encodings.idna", "concurrent.futures.thread", "asyncio.unix_events",
                 "traceback", "linecache")


def _drop_to(uid: int) -> None:
    # Modules the process would otherwise import lazily, after it can no longer read them.
    for module in _LATE_IMPORTS:
        importlib.import_module(module)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if _effective_capabilities() != 0:
        raise SystemExit("egress process kept capabilities after dropping root")


def _effective_capabilities() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return -1


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
    parser.add_argument("--uid", type=int)
    args = parser.parse_args()
    if args.uid is not None:
        _drop_to(args.uid)
    _bind_to_parent(args.parent_pid)
    common = CommonSettings()
    setup_logging("egress", common.log_level, common.log_json)
    asyncio.run(_serve(args.control_fd))


if __name__ == "__main__":
    main()
