"""The preload library's exec filter (execfilter.c) on real processes: with the jail's variable,
a process may start threads and make the freeze path's frozen copies but is killed by any exec,
fork, or namespace, mount or ptrace call; without it nothing changes; the variable does not
outlive the library's reading it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from aenv_nodeagent.artifacts.preload import ensure_preload_library
from aenv_nodeagent.vmm.frozen import FreezeChannel
from aenv_nodeagent.vmm.jail import EXEC_FILTER_ENV
from aenv_nodeagent.vmm.preload import preload_env

from .preloaded import fill, start_writer

_THREAD = """
import os, threading
t = threading.Thread(target=print, args=("thread",)); t.start(); t.join()
print(os.environ.get("AENV_EXEC_FILTER"), flush=True)
"""
_ATTEMPTS = {
    "execv": 'os.execv("/bin/true", ["true"])',
    "fork": "os.fork()",
    "spawn": 'os.posix_spawn("/bin/true", ["true"], {})',
    "subprocess": 'import subprocess; subprocess.run(["/bin/true"])',
    # Leaving its namespaces or reaching into another process: each harmless here and answered
    # unfiltered (the test runs as root; mount's null arguments fail with EFAULT, as it must not
    # touch the host's mounts), which the unfiltered run below checks by its exit status.
    "unshare": "assert libc.unshare(0) == 0",
    "setns": 'assert libc.setns(os.open("/proc/self/ns/net", os.O_RDONLY), 0) == 0',
    "ptrace": "assert libc.ptrace(0, 0, None, None) == 0",  # PTRACE_TRACEME
    "chroot": 'assert libc.chroot(b"/") == 0',
    "mount": "assert libc.mount(None, None, None, 0, None) == -1",
}


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return asyncio.run(ensure_preload_library(tmp_path_factory.mktemp("cache"))).path


def _run(library: Path, code: str, *, filtered: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LD_PRELOAD": str(library)}
    if filtered:
        env[EXEC_FILTER_ENV] = "1"
    return subprocess.run(
        [sys.executable, "-c", f"import ctypes, os\nlibc = ctypes.CDLL(None)\n{code}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _filters(status: str) -> int:
    (line,) = [line for line in status.splitlines() if line.startswith("Seccomp_filters:")]
    return int(line.split()[1])


def test_threads_run_and_the_variable_is_gone(library: Path) -> None:
    done = _run(library, _THREAD, filtered=True)
    assert (done.returncode, done.stdout) == (0, "thread\nNone\n"), done.stderr


@pytest.mark.parametrize("attempt", sorted(_ATTEMPTS))
def test_an_exec_or_fork_kills_the_process(library: Path, attempt: str) -> None:
    code = f"print('before', flush=True)\n{_ATTEMPTS[attempt]}\nprint('after', flush=True)"
    done = _run(library, code, filtered=True)
    assert (done.returncode, done.stdout) == (-signal.SIGSYS, "before\n"), done.stderr
    unfiltered = _run(library, code, filtered=False)  # the exec'd /bin/true prints nothing
    assert (unfiltered.returncode, unfiltered.stdout[:7]) == (0, "before\n"), unfiltered.stderr


def test_the_filter_is_one_more_seccomp_filter(library: Path) -> None:
    code = 'print(open("/proc/self/status").read())'
    without = _filters(_run(library, code, filtered=False).stdout)
    assert _filters(_run(library, code, filtered=True).stdout) == without + 1


async def test_frozen_copies_are_still_made(library: Path, tmp_path: Path) -> None:
    memory = fill(tmp_path / "memory")
    ours, theirs = FreezeChannel.pair()
    try:
        env = {**preload_env(library, memory, theirs), EXEC_FILTER_ENV: "1"}
        for writer in start_writer(memory, env, [theirs.fileno()]):
            theirs.close()
            assert _filters(Path(f"/proc/{writer.proc.pid}/status").read_text()) >= 1
            copy = await ours.freeze()
            try:
                assert Path(f"/proc/{copy.pid}/stat").read_text().split()[3] == str(os.getpid())
                writer.write(1)  # the process runs on
                assert writer.proc.poll() is None
            finally:
                copy.release()
    finally:
        ours.close()
        theirs.close()
