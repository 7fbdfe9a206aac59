"""filesystem.Filesystem RPCs (spec §3.5).

As upstream envd, every call acts as envd (root) whoever the caller is: the VM is the boundary
(the default `user` may sudo anyway). The caller names the user whose home relative paths start
from and who gets what is created: make_dir's and move's missing parents (existing ones are
left as they are); an unknown user is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterator

from envd.filesystem import filesystem_pb2 as pb

from .connect import RpcContext, RpcMethod, ServerStream, Unary
from .entry_info import entry_info
from .errors import EnvdError, invalid_argument, not_found
from .inotify import DirectoryWatcher, FsEvent
from .mounts import is_network_mount
from .state import SandboxState
from .users import User, make_dirs_owned, os_error_to_envd, resolve_path
from .users import username_from_authorization as _username

MAX_POLLED_EVENTS = 10_000
_EVENT_TYPES = {
    "CREATE": pb.EVENT_TYPE_CREATE,
    "WRITE": pb.EVENT_TYPE_WRITE,
    "REMOVE": pb.EVENT_TYPE_REMOVE,
    "RENAME": pb.EVENT_TYPE_RENAME,
    "CHMOD": pb.EVENT_TYPE_CHMOD,
}


def stat_entry(path: str) -> pb.EntryInfo:
    try:
        return entry_info(path)
    except OSError as exc:
        raise os_error_to_envd(exc, path) from exc


def list_entries(root: str, depth: int) -> list[pb.EntryInfo]:
    """Entries below `root` up to `depth` levels, in upstream's order (Go's filepath.WalkDir):
    depth first, each directory's names sorted by their bytes, a directory's contents right
    after it. Symlinks are listed but not descended."""
    entries: list[pb.EntryInfo] = []
    try:
        names = _sorted_names(root)
    except OSError as exc:
        raise os_error_to_envd(exc, root) from exc
    # An explicit stack of (directory, level, names left): trees deeper than Python's
    # recursion limit are listed too.
    stack: list[tuple[str, int, Iterator[str]]] = [(root, 1, iter(names))]
    while stack:
        directory, level, pending = stack[-1]
        name = next(pending, None)
        if name is None:
            stack.pop()
            continue
        path = os.path.join(directory, name)
        try:
            entry = entry_info(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise os_error_to_envd(exc, path) from exc
        entries.append(entry)
        if level < depth and entry.type == pb.FILE_TYPE_DIRECTORY and not entry.is_symlink:
            try:
                stack.append((path, level + 1, iter(_sorted_names(path))))
            except OSError:
                continue  # vanished or unreadable below the root: listed, not descended
    return entries


def _sorted_names(directory: str) -> list[str]:
    return sorted(os.listdir(directory), key=os.fsencode)


def fs_event(event: FsEvent, include_entry: bool) -> pb.FilesystemEvent:
    message = pb.FilesystemEvent(name=event.relative_name, type=_EVENT_TYPES[event.kind])
    if include_entry and event.kind not in ("REMOVE", "RENAME"):
        with contextlib.suppress(OSError):
            message.entry.CopyFrom(entry_info(event.absolute_path))
    return message


class PolledWatcher:
    """A watcher whose events accumulate until the next GetWatcherEvents (sync SDK)."""

    def __init__(self, watcher: DirectoryWatcher, include_entry: bool) -> None:
        self._watcher = watcher
        self._events: deque[pb.FilesystemEvent] = deque(maxlen=MAX_POLLED_EVENTS)
        self._task = asyncio.create_task(self._collect(include_entry))

    async def _collect(self, include_entry: bool) -> None:
        async for event in self._watcher.events():
            self._events.append(fs_event(event, include_entry))

    def drain(self) -> list[pb.FilesystemEvent]:
        events = list(self._events)
        self._events.clear()
        return events

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._watcher.close()


class FilesystemService:
    def __init__(self, state: SandboxState) -> None:
        self._state = state
        self._watchers: dict[str, PolledWatcher] = {}

    def methods(self) -> dict[str, RpcMethod]:
        return {
            "Stat": Unary(pb.StatRequest, self.stat),
            "MakeDir": Unary(pb.MakeDirRequest, self.make_dir),
            "Move": Unary(pb.MoveRequest, self.move),
            "ListDir": Unary(pb.ListDirRequest, self.list_dir),
            "Remove": Unary(pb.RemoveRequest, self.remove),
            "WatchDir": ServerStream(pb.WatchDirRequest, self.watch_dir),
            "CreateWatcher": Unary(pb.CreateWatcherRequest, self.create_watcher),
            "GetWatcherEvents": Unary(pb.GetWatcherEventsRequest, self.get_watcher_events),
            "RemoveWatcher": Unary(pb.RemoveWatcherRequest, self.remove_watcher),
        }

    def _caller(self, ctx: RpcContext) -> User:
        return self._state.resolve_user(_username(ctx.headers.get("authorization")))

    def _path(self, path: str, user: User) -> str:
        return resolve_path(path, user, self._state.default_workdir)

    async def stat(self, request: pb.StatRequest, ctx: RpcContext) -> pb.StatResponse:
        user = self._caller(ctx)
        return pb.StatResponse(entry=stat_entry(self._path(request.path, user)))

    async def make_dir(self, request: pb.MakeDirRequest, ctx: RpcContext) -> pb.MakeDirResponse:
        user = self._caller(ctx)
        return pb.MakeDirResponse(entry=_make_dir(self._path(request.path, user), user))

    async def move(self, request: pb.MoveRequest, ctx: RpcContext) -> pb.MoveResponse:
        user = self._caller(ctx)
        source = self._path(request.source, user)
        destination = self._path(request.destination, user)
        return pb.MoveResponse(entry=_move(source, destination, user))

    async def list_dir(self, request: pb.ListDirRequest, ctx: RpcContext) -> pb.ListDirResponse:
        user = self._caller(ctx)
        path = self._path(request.path, user)
        try:
            target = os.stat(path)
        except OSError as exc:
            raise os_error_to_envd(exc, path) from exc
        if not stat.S_ISDIR(target.st_mode):
            raise invalid_argument(f"path '{path}' is not a directory")
        entries = await asyncio.to_thread(list_entries, path, max(request.depth, 1))
        return pb.ListDirResponse(entries=entries)

    async def remove(self, request: pb.RemoveRequest, ctx: RpcContext) -> pb.RemoveResponse:
        user = self._caller(ctx)
        path = self._path(request.path, user)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                await asyncio.to_thread(shutil.rmtree, path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            pass  # rm -rf semantics, like upstream
        except OSError as exc:
            raise os_error_to_envd(exc, path) from exc
        return pb.RemoveResponse()

    def _open_watcher(
        self, path: str, recursive: bool, allow_network_mounts: bool, user: User
    ) -> DirectoryWatcher:
        root = self._path(path, user)
        try:
            target = os.stat(root)
        except OSError as exc:
            raise os_error_to_envd(exc, root) from exc
        if not stat.S_ISDIR(target.st_mode):
            raise invalid_argument(f"path '{root}' is not a directory")
        if not allow_network_mounts and is_network_mount(root):
            raise invalid_argument(f"cannot watch path on network filesystem: {root}")
        return DirectoryWatcher(root, recursive)

    async def watch_dir(
        self, request: pb.WatchDirRequest, ctx: RpcContext
    ) -> AsyncIterator[pb.WatchDirResponse]:
        user = self._caller(ctx)
        watcher = self._open_watcher(
            request.path, request.recursive, request.allow_network_mounts, user
        )
        queue: asyncio.Queue[pb.FilesystemEvent] = asyncio.Queue(maxsize=MAX_POLLED_EVENTS)

        async def collect() -> None:
            async for event in watcher.events():
                await queue.put(fs_event(event, request.include_entry))

        collector = asyncio.create_task(collect())
        try:
            yield pb.WatchDirResponse(start=pb.WatchDirResponse.StartEvent())
            while True:
                try:
                    async with asyncio.timeout(ctx.keepalive_s):
                        event = await queue.get()
                except TimeoutError:
                    yield pb.WatchDirResponse(keepalive=pb.WatchDirResponse.KeepAlive())
                    continue
                yield pb.WatchDirResponse(filesystem=event)
        finally:
            collector.cancel()
            watcher.close()

    async def create_watcher(
        self, request: pb.CreateWatcherRequest, ctx: RpcContext
    ) -> pb.CreateWatcherResponse:
        user = self._caller(ctx)
        watcher = self._open_watcher(
            request.path, request.recursive, request.allow_network_mounts, user
        )
        watcher_id = uuid.uuid4().hex
        self._watchers[watcher_id] = PolledWatcher(watcher, request.include_entry)
        return pb.CreateWatcherResponse(watcher_id=watcher_id)

    async def get_watcher_events(
        self, request: pb.GetWatcherEventsRequest, ctx: RpcContext
    ) -> pb.GetWatcherEventsResponse:
        self._caller(ctx)
        watcher = self._watchers.get(request.watcher_id)
        if watcher is None:
            raise not_found(f"watcher '{request.watcher_id}' not found")
        return pb.GetWatcherEventsResponse(events=watcher.drain())

    async def remove_watcher(
        self, request: pb.RemoveWatcherRequest, ctx: RpcContext
    ) -> pb.RemoveWatcherResponse:
        self._caller(ctx)
        watcher = self._watchers.pop(request.watcher_id, None)
        if watcher is None:
            raise not_found(f"watcher '{request.watcher_id}' not found")
        await watcher.stop()
        return pb.RemoveWatcherResponse()


def _make_dir(path: str, user: User) -> pb.EntryInfo:
    if os.path.isdir(path):
        raise EnvdError("already_exists", f"directory '{path}' already exists")
    if os.path.lexists(path):
        raise invalid_argument(f"path '{path}' already exists and is not a directory")
    try:
        make_dirs_owned(path, user)
    except OSError as exc:
        raise os_error_to_envd(exc, path) from exc
    return stat_entry(path)


def _move(source: str, destination: str, user: User) -> pb.EntryInfo:
    if not os.path.lexists(source):
        raise not_found(f"path '{source}' does not exist")
    try:
        make_dirs_owned(os.path.dirname(destination), user)
        os.rename(source, destination)
    except OSError as exc:
        raise os_error_to_envd(exc, source) from exc
    return stat_entry(destination)


__all__ = ["FilesystemService", "list_entries", "stat_entry"]
