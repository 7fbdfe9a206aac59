"""A fake sandbox as the official SDK's `AsyncSandbox` shows it to the commands (`pty`,
`commands`, `files`), and a fake local terminal driven by a script of keys and resizes."""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
import shlex
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from e2b import CommandExitException, CommandResult, PtySize

Step = bytes | tuple[int, int]  # a key press, or a window resize to (columns, rows)


@dataclass
class FakeTerminal:
    script: list[Step] = field(default_factory=list)
    columns: int = 80
    rows: int = 24
    tty: bool = True
    eof: bool = True  # after the script: end of input (a pipe), else none ever (a terminal)
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)
    raw_entered: int = 0
    raw_now: bool = False
    _resized: Callable[[], None] | None = None

    def interactive(self) -> bool:
        return self.tty

    def size(self) -> tuple[int, int]:
        return self.columns, self.rows

    @contextlib.contextmanager
    def raw(self) -> Iterator[None]:
        self.raw_entered += 1
        self.raw_now = True
        try:
            yield
        finally:
            self.raw_now = False

    def on_resize(self, callback: Callable[[], None]) -> Callable[[], None]:
        self._resized = callback

        def undo() -> None:
            self._resized = None

        return undo

    async def read_input(self) -> AsyncIterator[bytes]:
        for step in self.script:
            await asyncio.sleep(0.01)  # the guest's answer to the previous step first
            if isinstance(step, bytes):
                yield step
            else:
                self.columns, self.rows = step
                assert self._resized is not None, "resized outside a session"
                self._resized()
        if not self.eof:
            await asyncio.Event().wait()

    def write(self, data: bytes) -> None:
        self.out += data

    def write_err(self, data: bytes) -> None:
        self.err += data


class FakeProcess:
    """A guest process: output through its callbacks, an end with an exit code."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.stdin = bytearray()
        self.stdin_closed = False
        self._ended: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def end(self, code: int) -> None:
        if not self._ended.done():
            self._ended.set_result(code)

    async def wait(self) -> CommandResult[str]:
        code = await self._ended
        if code != 0:
            raise CommandExitException(stdout="", stderr="", exit_code=code, error=None)
        return CommandResult(stdout="", stderr="", exit_code=0, error=None)


@dataclass
class FakePty:
    """A shell: echoes keys; `exit N` + Enter ends it with N; Ctrl-C prints `^C`."""

    created: list[dict[str, Any]] = field(default_factory=list)
    sizes: list[tuple[int, int]] = field(default_factory=list)
    process: FakeProcess | None = None
    _on_data: Callable[[bytes], object] | None = None

    async def create(self, size: PtySize, on_data: Callable[[bytes], object],
                     **options: Any) -> FakeProcess:
        self.created.append({"size": (size.cols, size.rows), **options})
        self._on_data = on_data
        self.process = FakeProcess(pid=7)
        on_data(b"$ ")
        return self.process

    async def resize(self, pid: int, size: PtySize) -> None:
        self.sizes.append((size.cols, size.rows))

    async def send_stdin(self, pid: int, data: bytes) -> None:
        assert self.process is not None and self._on_data is not None
        self.process.stdin += data
        self._on_data(b"^C" if data == b"\x03" else data)
        if data.startswith(b"exit ") and data.endswith(b"\r"):
            self.process.end(int(data.split()[1]))


@dataclass
class FakeCommands:
    """`sh -c` of a few words: `out X`, `err X`, `cat` (stdin to stdout), `exit N`."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    process: FakeProcess | None = None
    _out: Callable[[str], object] | None = None

    async def run(self, cmd: str, *, on_stdout: Callable[[str], object],
                  on_stderr: Callable[[str], object], **options: Any) -> FakeProcess:
        self.runs.append({"cmd": cmd, **options})
        self.process = FakeProcess(pid=9)
        self._out = on_stdout
        words = shlex.split(cmd)
        for verb, arg in zip(words[::2], words[1::2], strict=False):
            if verb == "out":
                on_stdout(arg + "\n")
            elif verb == "err":
                on_stderr(arg + "\n")
            elif verb == "exit":
                self.process.end(int(arg))
        if words != ["cat"]:
            self.process.end(0)
        return self.process

    async def send_stdin(self, pid: int, data: bytes) -> None:
        assert self.process is not None and self._out is not None
        self.process.stdin += data
        self._out(data.decode())

    async def close_stdin(self, pid: int) -> None:
        assert self.process is not None
        self.process.stdin_closed = True
        self.process.end(0)


@dataclass
class FakeGuest:
    sandbox_id: str = "sb1"
    pty: FakePty = field(default_factory=FakePty)
    commands: FakeCommands = field(default_factory=FakeCommands)
    files: Any = None  # FakeFiles (defined below)


@dataclass
class Entry:
    name: str
    type: Any
    path: str
    size: int


@dataclass
class FakeFiles:
    """A guest file system: files by absolute path; folders are their prefixes or made ones."""

    files: dict[str, bytes] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=lambda: {"/", "/tmp", "/home/user"})

    def _is_dir(self, path: str) -> bool:
        path = path.rstrip("/") or "/"
        return path in self.dirs or any(f.startswith(path + "/") for f in self.files)

    async def exists(self, path: str) -> bool:
        return path.rstrip("/") in self.files or self._is_dir(path)

    async def get_info(self, path: str) -> Entry:
        from e2b import FileNotFoundException, FileType
        if path.rstrip("/") in self.files:
            return Entry(posixpath.basename(path), FileType.FILE, path, len(self.files[path]))
        if self._is_dir(path):
            return Entry(posixpath.basename(path.rstrip("/")), FileType.DIR, path, 0)
        raise FileNotFoundException(f"path '{path}' does not exist")

    async def make_dir(self, path: str) -> bool:
        self.dirs.add(path.rstrip("/"))
        return True

    async def write(self, path: str, data: AsyncIterator[bytes]) -> None:
        self.files[path] = b"".join([chunk async for chunk in data])

    async def list(self, path: str, depth: int) -> list[Entry]:
        from e2b import FileType
        root = path.rstrip("/")
        below = [f for f in self.files if f.startswith(root + "/")]
        folders = {posixpath.dirname(f) for f in below} | {
            d for d in self.dirs if d.startswith(root + "/")}
        return [Entry(posixpath.basename(d), FileType.DIR, d, 0) for d in folders
                if d != root] + [Entry(posixpath.basename(f), FileType.FILE, f,
                                       len(self.files[f])) for f in below]

    async def read(self, path: str, format: str) -> AsyncIterator[bytes]:
        data = self.files[path]

        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(data), 3):
                yield data[start:start + 3]

        return chunks()
