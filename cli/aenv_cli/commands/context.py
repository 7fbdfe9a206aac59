"""What a people-facing command works with, made once per invocation and passed in: the server
and key, its REST client, the opener of sandboxes through the official SDK (envd: commands,
PTYs, files), the local terminal and the consoles. Tests hand in fakes as Typer's `obj`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import cached_property

import typer
from e2b import AsyncSandbox
from rich.console import Console

from aenv_cli.api import SandboxApi
from aenv_cli.commands.guests import connect
from aenv_cli.commands.terminal import LocalTerminal, Terminal
from aenv_cli.server import Server, resolve_server

GuestOpener = Callable[[str], Awaitable[AsyncSandbox]]


class Clients:
    def __init__(
        self,
        resolve: Callable[[], Server] = resolve_server,
        *,
        make_api: Callable[[Server], SandboxApi] = SandboxApi,
        open_guest: GuestOpener | None = None,
        terminal: Terminal | None = None,
        out: Console | None = None,
    ) -> None:
        self._resolve = resolve
        self._make_api = make_api
        self._open_guest = open_guest
        self.terminal: Terminal = terminal or LocalTerminal()
        self.out = out or Console(highlight=False)

    @cached_property
    def server(self) -> Server:
        """:raise Unauthenticated: no login, no environment, no local platform."""
        return self._resolve()

    @cached_property
    def api(self) -> SandboxApi:
        return self._make_api(self.server)

    def api_for(self, server: Server) -> SandboxApi:
        """A client of another server (`aenv auth login` checks a key before storing it)."""
        return self._make_api(server)

    async def guest(self, sandbox_id: str) -> AsyncSandbox:
        """The running sandbox through the official SDK (the gateway is its sandbox URL too).

        :raise NotFound, Unauthenticated, Unavailable: as `guests.connect` maps the SDK's.
        """
        if self._open_guest is not None:
            return await self._open_guest(sandbox_id)
        return await connect(self.server, sandbox_id)


def clients(ctx: typer.Context) -> Clients:
    """The invocation's Clients (a test's, else made from the environment on first use)."""
    root = ctx.find_root()
    if not isinstance(root.obj, Clients):
        root.obj = Clients()
    return root.obj
