"""`aenv cp`: files and folders into and out of a sandbox through the official SDK's file API,
streamed (never whole in memory), with a progress bar per file on a terminal.

As `docker cp`: a destination that is an existing folder receives the source under its own name;
otherwise the destination is the copy's name."""

from __future__ import annotations

import asyncio
import os
import posixpath
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from e2b import AsyncSandbox, FileType
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TransferSpeedColumn,
)

from aenv_cli.commands.context import clients
from aenv_cli.commands.failures import clean_errors, stderr
from aenv_cli.commands.guests import sdk_errors
from aenv_cli.server import Server
from aenv_common.errors import InvalidArgument, NotFound

CHUNK = 256 * 1024
# Deep enough for any tree a person copies; the SDK lists a folder's whole tree in one call.
LIST_DEPTH = 64


@dataclass(frozen=True)
class Place:
    """One side of a copy: a local path, or `sandbox_id:/path`."""

    path: str
    sandbox_id: str | None = None

    @classmethod
    def parse(cls, text: str) -> Place:
        head, sep, tail = text.partition(":")
        # `./a:b` and `/x:y` are local paths; `id:path` names a sandbox.
        if sep and head and "/" not in head and not text.startswith("."):
            if not tail:
                raise InvalidArgument(f"{text!r}: a sandbox path after ':' is needed")
            return cls(tail, head)
        return cls(text)


@clean_errors
def cp(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(help="A local path, or ID:/path.")],
    destination: Annotated[str, typer.Argument(help="A local path, or ID:/path.")],
) -> None:
    """Copy files or folders between this machine and a sandbox (either way).

    Example: aenv cp ./data ib0rbwk8ypuqz3fj8pk4x:/home/user/   |   aenv cp ID:/tmp/out.txt .
    """
    given = clients(ctx)
    src, dst = Place.parse(source), Place.parse(destination)
    if (src.sandbox_id is None) == (dst.sandbox_id is None):
        raise InvalidArgument("one side of cp is a local path and the other ID:/path")
    progress = _progress(given.terminal.interactive())
    sandbox_id = src.sandbox_id or dst.sandbox_id or ""

    async def run() -> int:
        guest = await given.guest(sandbox_id)
        copier = Copier(given.server, guest, progress)
        with progress:
            if src.sandbox_id is None:
                return await copier.upload(Path(src.path).expanduser(), dst.path)
            return await copier.download(src.path, Path(dst.path).expanduser())

    count = asyncio.run(run())
    stderr.print(f"copied {count} file{'s' if count != 1 else ''}", highlight=False)


class Copier:
    def __init__(self, server: Server, guest: AsyncSandbox, progress: Progress) -> None:
        self._server = server
        self._guest = guest
        self._progress = progress

    async def upload(self, source: Path, destination: str) -> int:
        if not source.exists():
            raise NotFound(f"no such local file or folder: {source}")
        target = destination
        async with sdk_errors(self._server):
            if destination.endswith("/") or await self._is_remote_dir(destination):
                target = posixpath.join(destination, source.name)
            files = [source] if source.is_file() else sorted(
                p for p in source.rglob("*") if p.is_file())
            if source.is_dir():
                await self._guest.files.make_dir(target)
            for path in files:
                remote = target if path == source else posixpath.join(
                    target, path.relative_to(source).as_posix())
                await self._guest.files.write(remote, self._chunks(path, remote))
        return len(files)

    async def download(self, source: str, destination: Path) -> int:
        async with sdk_errors(self._server):
            info = await self._guest.files.get_info(source)
            target = destination / posixpath.basename(source.rstrip("/")) \
                if destination.is_dir() else destination
            if info.type != FileType.DIR:
                await self._fetch(source, target)
                return 1
            entries = await self._guest.files.list(source, depth=LIST_DEPTH)
            target.mkdir(parents=True, exist_ok=True)
            count = 0
            for entry in sorted(entries, key=lambda e: e.path):
                local = target / posixpath.relpath(entry.path, source)
                if entry.type == FileType.DIR:
                    local.mkdir(parents=True, exist_ok=True)
                elif entry.type == FileType.FILE:
                    await self._fetch(entry.path, local, entry.size)
                    count += 1
            return count

    async def _is_remote_dir(self, path: str) -> bool:
        if not await self._guest.files.exists(path):
            return False
        return (await self._guest.files.get_info(path)).type == FileType.DIR

    async def _chunks(self, path: Path, remote: str) -> AsyncIterator[bytes]:
        advance = self._bar(remote, path.stat().st_size)
        with path.open("rb") as file:
            while chunk := file.read(CHUNK):
                advance(len(chunk))
                yield chunk

    async def _fetch(self, remote: str, local: Path, size: int | None = None) -> None:
        advance = self._bar(remote, size)
        local.parent.mkdir(parents=True, exist_ok=True)
        partial = local.with_name(f".{local.name}.aenv-cp")
        stream = await self._guest.files.read(remote, format="stream")
        try:
            with partial.open("wb") as file:
                async for chunk in stream:
                    file.write(chunk)
                    advance(len(chunk))
            os.replace(partial, local)
        finally:
            partial.unlink(missing_ok=True)

    def _bar(self, name: str, size: int | None) -> Callable[[int], None]:
        task = self._progress.add_task(name, total=size)
        return lambda n: self._progress.advance(task, n)


def _progress(shown: bool) -> Progress:
    """Bars on stderr, only on a terminal (piped output stays clean)."""
    return Progress(
        TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
        console=stderr, disable=not shown, transient=False,
    )
