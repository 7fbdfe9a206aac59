"""Spawned processes: pipes or a pty, output fan-out to streams, exit, signals, input."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
import struct
import subprocess
import termios
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeAlias

from envd.process import process_pb2 as pb

from .channel import EventChannel
from .errors import EnvdError, internal, invalid_argument, not_found
from .fdio import try_read, wait_fd, write_all
from .output import OutputChunk
from .users import User

log = logging.getLogger(__name__)

# After the process exits, output still arriving from descendants holding its pipes is read for
# this long before the end event is sent.
BASH = "/bin/bash"
POSIX_SHELL = "/bin/sh"
EXIT_DRAIN_GRACE_S = 2.0
# Output pipes get this capacity and are read this much at a time: a fast producer (`yes`,
# `cat bigfile`) then costs envd a few large reads instead of one wake-up per 64 KiB.
PIPE_BYTES = 1024 * 1024
# A queued chunk absorbs later reads of its stream up to this size (one frame per chunk).
FRAME_BYTES = 1024 * 1024

Event = pb.ProcessEvent
# What a stream's channel carries: protobuf events (start, end) and raw output.
StreamItem: TypeAlias = "pb.ProcessEvent | OutputChunk"


@dataclass(frozen=True)
class SpawnSpec:
    config: pb.ProcessConfig
    tag: str | None
    env: dict[str, str]
    cwd: str
    user: User
    pty_size: tuple[int, int] | None  # (cols, rows)
    stdin: bool
    lifetime_s: float | None


def end_event(status: int) -> Event:
    """Exit status -> EndEvent worded like Go's os.ProcessState (what upstream envd sends)."""
    end = Event.EndEvent()
    if os.WIFEXITED(status):
        end.exit_code = os.WEXITSTATUS(status)
        end.exited = True
        end.status = f"exit status {end.exit_code}"
    else:
        sig = os.WTERMSIG(status)
        name = signal.strsignal(sig) or f"signal {sig}"
        end.exit_code = -1
        end.exited = False
        end.status = "signal: " + name[:1].lower() + name[1:]
        if os.WCOREDUMP(status):
            end.status += " (core dumped)"
    if not (end.exited and end.exit_code == 0):
        end.error = end.status
    return Event(end=end)


def available_shell(cmd: str) -> str:
    """The SDKs run every command as `/bin/bash -l -c ...`; an image without bash (busybox,
    Alpine) gets its POSIX shell, which takes the same options."""
    if cmd == BASH and not os.path.exists(BASH) and os.path.exists(POSIX_SHELL):
        return POSIX_SHELL
    return cmd


def set_winsize(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _enlarge_pipe(fd: int) -> None:
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:  # over the unprivileged per-user pipe quota: the default 64 KiB still works
        pass


def _acquire_controlling_tty() -> None:  # runs in the child between fork and exec
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class ManagedProcess:
    """One child of envd and the streams (Start/Connect) following it."""

    def __init__(self, spec: SpawnSpec) -> None:
        self.config = spec.config
        self.tag = spec.tag
        self.is_pty = spec.pty_size is not None
        self.killed_by_deadline = False
        self.end: Event | None = None
        self._subscribers: set[EventChannel[StreamItem]] = set()
        self._input_lock = asyncio.Lock()
        self._stdin_fd: int | None = None
        self._drain_over = asyncio.Event()
        self._popen, outputs = self._spawn(spec)
        self.pid = self._popen.pid
        loop = asyncio.get_running_loop()
        self._lifetime = loop.call_later(spec.lifetime_s, self._expire) if spec.lifetime_s else None
        self._pumps = [asyncio.create_task(self._pump(fd, kind)) for fd, kind in outputs]
        self.exited = asyncio.create_task(self._await_exit())

    def _spawn(self, spec: SpawnSpec) -> tuple[subprocess.Popen[bytes], list[tuple[int, str]]]:
        argv = [available_shell(spec.config.cmd), *spec.config.args]
        # Switching identity needs root; an unprivileged envd (tests) runs children as itself.
        privileged = os.geteuid() == 0
        uid = spec.user.uid if privileged else None
        gid = spec.user.gid if privileged else None
        groups = spec.user.groups if privileged else None
        close_in_parent: list[int] = []
        try:
            if spec.pty_size is not None:
                master, slave = os.openpty()
                close_in_parent.append(slave)
                set_winsize(master, *spec.pty_size)
                if os.geteuid() == 0:
                    os.fchown(slave, spec.user.uid, spec.user.gid)
                popen = subprocess.Popen(
                    argv,
                    stdin=slave,
                    stdout=slave,
                    stderr=slave,
                    env=spec.env,
                    cwd=spec.cwd,
                    start_new_session=True,
                    preexec_fn=_acquire_controlling_tty,
                    user=uid,
                    group=gid,
                    extra_groups=groups,
                )
                os.set_blocking(master, False)
                self._stdin_fd = master
                return popen, [(os.dup(master), "pty")]
            out_r, out_w = os.pipe2(os.O_CLOEXEC)
            err_r, err_w = os.pipe2(os.O_CLOEXEC)
            close_in_parent += [out_w, err_w]
            stdin: int = subprocess.DEVNULL
            if spec.stdin:
                in_r, in_w = os.pipe2(os.O_CLOEXEC)
                close_in_parent.append(in_r)
                stdin = in_r
                self._stdin_fd = in_w
                os.set_blocking(in_w, False)
            for fd in (out_r, err_r):
                _enlarge_pipe(fd)
            popen = subprocess.Popen(
                argv,
                stdin=stdin,
                stdout=out_w,
                stderr=err_w,
                env=spec.env,
                cwd=spec.cwd,
                start_new_session=True,
                user=uid,
                group=gid,
                extra_groups=groups,
            )
            for fd in (out_r, err_r):
                os.set_blocking(fd, False)
            return popen, [(out_r, "stdout"), (err_r, "stderr")]
        except OSError as exc:
            raise internal(f"error starting process '{spec.config.cmd}': {exc}") from exc
        finally:
            for fd in close_in_parent:
                os.close(fd)

    # ----- output ------------------------------------------------------------------------------

    def subscribe(self) -> EventChannel[StreamItem] | None:
        """A channel of live events from now on; None when the process has already ended."""
        if self.end is not None:
            return None
        channel: EventChannel[StreamItem] = EventChannel()
        self._subscribers.add(channel)
        return channel

    def unsubscribe(self, channel: EventChannel[StreamItem]) -> None:
        self._subscribers.discard(channel)
        channel.abandon()

    async def _pump(self, fd: int, kind: str) -> None:
        try:
            while (data := await self._read(fd)) != b"":
                for channel in list(self._subscribers):
                    await channel.wait_room()
                    tail = channel.tail()
                    # The consumer is behind: grow the chunk it will take next (same stream
                    # only, so stdout/stderr interleaving keeps its order).
                    if (
                        isinstance(tail, OutputChunk)
                        and tail.kind == kind
                        and tail.size < FRAME_BYTES
                    ):
                        tail.absorb(data)
                        channel.grew(len(data))
                    else:
                        channel.put_nowait(OutputChunk(kind, data), len(data))
        except Exception:
            log.exception("output pump failed", extra={"pid": self.pid, "stream": kind})
        finally:
            os.close(fd)

    async def _read(self, fd: int) -> bytes:
        while (data := try_read(fd, PIPE_BYTES)) is None:
            if self._drain_over.is_set():
                return b""
            readable = asyncio.ensure_future(wait_fd(fd))
            drained = asyncio.ensure_future(self._drain_over.wait())
            await asyncio.wait({readable, drained}, return_when=asyncio.FIRST_COMPLETED)
            for waiter in (readable, drained):
                waiter.cancel()
        return data

    # ----- exit --------------------------------------------------------------------------------

    async def _await_exit(self) -> None:
        pidfd = os.pidfd_open(self.pid)
        try:
            await wait_fd(pidfd)
        finally:
            os.close(pidfd)
        # pidfd readable: the child is a zombie, so this returns at once.
        _, status = os.waitpid(self.pid, os.WNOHANG)  # noqa: ASYNC222
        self._popen.returncode = os.waitstatus_to_exitcode(status)
        if self._lifetime is not None:
            self._lifetime.cancel()
        asyncio.get_running_loop().call_later(EXIT_DRAIN_GRACE_S, self._drain_over.set)
        await asyncio.gather(*self._pumps, return_exceptions=True)
        self.end = end_event(status)
        for channel in list(self._subscribers):
            channel.finish(self.end)
        self._subscribers.clear()
        async with self._input_lock:
            self._close_input()
        log.info("process ended", extra={"pid": self.pid, "status": self.end.end.status})

    def _close_input(self) -> None:
        if self._stdin_fd is not None:
            os.close(self._stdin_fd)
            self._stdin_fd = None

    def _expire(self) -> None:
        self.killed_by_deadline = True
        self.signal(signal.SIGKILL)

    # ----- control -----------------------------------------------------------------------------

    def signal(self, sig: int) -> None:
        if self.end is not None:
            return
        try:
            # Its own session and group: the whole job goes, so no orphan keeps the pipes open.
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            os.kill(self.pid, sig)

    async def write_input(self, data: bytes, to_pty: bool) -> None:
        if to_pty != self.is_pty:
            kind = "pty" if to_pty else "stdin"
            raise invalid_argument(f"process {self.pid} does not accept {kind} input")
        async with self._input_lock:
            if self._stdin_fd is None:
                raise EnvdError("failed_precondition", f"stdin of process {self.pid} is closed")
            try:
                await write_all(self._stdin_fd, data)
            except BrokenPipeError:
                raise EnvdError("failed_precondition", "process closed its stdin") from None

    async def close_stdin(self) -> None:
        if self.is_pty:
            raise invalid_argument("cannot close stdin of a pty process, send EOT (0x04)")
        async with self._input_lock:
            self._close_input()

    def resize(self, cols: int, rows: int) -> None:
        if not self.is_pty or self._stdin_fd is None:
            raise invalid_argument(f"process {self.pid} has no pty")
        set_winsize(self._stdin_fd, cols, rows)

    def info(self) -> pb.ProcessInfo:
        info = pb.ProcessInfo(config=self.config, pid=self.pid)
        if self.tag is not None:
            info.tag = self.tag
        return info


class ProcessManager:
    """The table of processes, keeping finished ones briefly for late Process/Connect calls."""

    def __init__(self, retention_s: float) -> None:
        self._retention_s = retention_s
        self._by_pid: dict[int, ManagedProcess] = {}

    def spawn(self, spec: SpawnSpec) -> ManagedProcess:
        process = ManagedProcess(spec)
        self._by_pid[process.pid] = process
        process.exited.add_done_callback(lambda _: self._schedule_forget(process))
        log.info("process started", extra={"pid": process.pid, "cmd": spec.config.cmd})
        return process

    def _schedule_forget(self, process: ManagedProcess) -> None:
        def forget() -> None:
            if self._by_pid.get(process.pid) is process:
                del self._by_pid[process.pid]

        asyncio.get_running_loop().call_later(self._retention_s, forget)

    def select(self, selector: pb.ProcessSelector) -> ManagedProcess:
        which = selector.WhichOneof("selector")
        if which == "pid":
            process = self._by_pid.get(selector.pid)
            if process is None:
                raise not_found(f"process with pid {selector.pid} not found")
            return process
        if which == "tag":
            for candidate in self._by_pid.values():
                if candidate.tag == selector.tag and candidate.end is None:
                    return candidate
            raise not_found(f"process with tag '{selector.tag}' not found")
        raise invalid_argument("process selector is empty")

    def running(self) -> Iterable[ManagedProcess]:
        return [p for p in self._by_pid.values() if p.end is None]
