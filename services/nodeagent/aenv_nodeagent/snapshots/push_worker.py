"""Background pushes run in a child process at a low CPU priority, so they yield to creates.

A push reads, hashes, compresses and uploads up to gigabytes (a fresh node's built-in template
captures with their disks: ~1 GB). Run in the node agent's process, it held the default thread
pool, the GIL and the event loop beside the create path and competed with QEMU at the same
priority: creates during a fresh node's start-up pushes were 60% slower. In a child at nice
`nice` (19: the kernel gives a nice-19 task ~1.5% of a busy CPU beside nice-0 ones) it uses
little more than what creates and guests leave idle, and the agent's threads and loop are not
touched. (nice orders tasks within one CPU cgroup: on cgroup v1 the VMs' slice sits inside the
agent's, as here; on v2 it is the agent's sibling, and the push yields to the agent's own threads
only unless the agent's cgroup weighs little.) What arrives is checked and stored by snapstore
at its own priority: it gets only as much to do as the niced push sends.

No caller waits for these pushes (snapshots, paused sandboxes and templates are pushed in the
background, SnapshotPersistence.push_soon); pulls, which restores wait for, stay in the agent at
its own priority. The child is one `python -m` of this module: the request as a JSON line on
stdin, the push's stats (or its error) as JSON on stdout. It ends itself when its stdin closes,
so a node agent that dies (even by SIGKILL) leaves no push behind to land a manifest after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

import grpc

from aenv_common.config import CommonSettings
from aenv_common.errors import Unavailable
from aenv_common.logging import setup_logging
from aenv_common.snapshots import PushStats, push_files, snapstore_stub

# The default of NodeAgentSettings.snapstore_push_nice: the lowest priority nice offers.
LOWEST_NICE = 19


class PushFailed(Unavailable):
    """The child's push failed (the store or its S3 away, a file unreadable): retried."""


@dataclasses.dataclass(frozen=True)
class PushRequest:
    address: str
    manifest_id: str
    files: dict[str, str]
    labels: dict[str, str]


async def push_in_child(
    address: str, manifest_id: str, files: Mapping[str, Path], labels: Mapping[str, str],
    nice: int,
) -> PushStats:
    """Pushes `files` as `manifest_id` from a child process at `nice`; a cancel kills it.

    :raise PushFailed: the push failed (its error's text is the child's).
    """
    request = PushRequest(address, manifest_id, {k: str(v) for k, v in files.items()},
                          dict(labels))
    # Niced from its exec on: its start (imports: ~0.5 s of CPU) and every thread it makes.
    proc = await asyncio.create_subprocess_exec(
        "nice", "-n", str(nice), sys.executable, "-m", __name__,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, start_new_session=True)
    _nice_autogroup(proc.pid, nice)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(dataclasses.asdict(request)).encode() + b"\n")
        await proc.stdin.drain()
        reply = await proc.stdout.read()
        code = await proc.wait()
    except BaseException:  # cancelled (a delete, a stop): its manifest must not land later
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
    return _stats(reply, code)


def _nice_autogroup(pid: int, nice: int) -> None:
    """Where the kernel groups a session's tasks in the root CPU cgroup (autogroups), nice orders
    only tasks of one session, and the group weighs as one nice-0 task beside the VMs' cgroup:
    the worker, a session of its own, has its group at `nice` too."""
    with contextlib.suppress(OSError):  # no autogroups here: its own nice is enough
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))


def _stats(reply: bytes, code: int) -> PushStats:
    try:
        answer = json.loads(reply)
    except ValueError:
        raise PushFailed(f"push worker exited with {code} and no answer") from None
    if "error" in answer:
        raise PushFailed(str(answer["error"]))
    return PushStats(**answer["stats"])


# --- the child ----------------------------------------------------------------------------------


def _end_with_parent() -> None:
    """Exits once stdin closes: the agent is done with it, or dead. Reads the descriptor, not
    sys.stdin: a daemon thread holding its lock would abort the interpreter's shutdown."""
    while os.read(sys.stdin.fileno(), 4096):
        pass
    os._exit(1)


async def _push(request: PushRequest) -> PushStats:
    files = {name: Path(path) for name, path in request.files.items()}
    async with grpc.aio.insecure_channel(request.address) as channel:
        return await push_files(snapstore_stub(channel), request.manifest_id, "", files,
                                labels=request.labels)


def main() -> None:
    request = PushRequest(**json.loads(sys.stdin.buffer.readline()))
    threading.Thread(target=_end_with_parent, daemon=True).start()
    common = CommonSettings()
    setup_logging("nodeagent", common.log_level, common.log_json)
    try:
        answer: dict[str, object] = {"stats": dataclasses.asdict(asyncio.run(_push(request)))}
    except Exception as err:  # the agent retries it: only its text crosses
        answer = {"error": str(err) or type(err).__name__}
    sys.stdout.write(json.dumps(answer))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
