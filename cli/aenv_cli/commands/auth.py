"""`aenv auth`: which server and key the commands use. A Typer sub-app others extend (e.g.
`aenv auth key …`) by adding commands to `auth_app`."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from aenv_cli.commands.context import clients
from aenv_cli.commands.failures import clean_errors
from aenv_cli.server import (
    KEY_ENV,
    URL_ENV,
    Server,
    aenv_home,
    normalize_url,
    remove_login,
    resolve_server,
    save_login,
)
from aenv_common.errors import AenvError, InvalidArgument

auth_app = typer.Typer(help="Log in to an aenv server; show which one is used.",
                       no_args_is_help=True)


@auth_app.command("login")
@clean_errors
def login(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option(
        "--url", help="The server's API URL (else AENV_URL, else the local platform's).")] = None,
    api_key: Annotated[str | None, typer.Option(
        "--api-key", "--key", help="The API key (else AENV_API_KEY, else asked for).")] = None,
    no_verify: Annotated[bool, typer.Option(
        "--no-verify", help="Store without asking the server.")] = False,
) -> None:
    """Store a server URL and API key (0600, in the aenv home's config.json), checked first.

    Example: aenv auth login --url http://127.0.0.1:3000 --api-key e2b_…
    """
    url, api_key = _login_inputs(url, api_key)
    server = Server(normalize_url(url), api_key, "login")
    if not no_verify:
        _verify(ctx, server)
    path = save_login(aenv_home(), server.url, server.api_key)
    clients(ctx).out.print(f"logged in to {server.url} (saved to {path})")


@auth_app.command("status")
@clean_errors
def status(ctx: typer.Context) -> None:
    """Which server and key the commands use, where they come from, and whether the key works.

    Example: aenv auth status
    """
    server = clients(ctx).server
    out = clients(ctx).out
    out.print(f"server: {server.url}")
    out.print(f"key:    {mask(server.api_key)}")
    out.print(f"from:   {server.source}")
    _verify(ctx, server)
    out.print("status: [green]the server accepts the key[/]")


@auth_app.command("logout")
@clean_errors
def logout(ctx: typer.Context) -> None:
    """Forget the stored login (the environment and the local platform still apply).

    Example: aenv auth logout
    """
    removed = remove_login(aenv_home())
    clients(ctx).out.print("logged out" if removed else "no stored login")


def mask(api_key: str) -> str:
    """Enough of a key to tell keys apart, never the key."""
    return f"{api_key[:4]}…{api_key[-4:]}" if len(api_key) > 12 else "…"


def _login_inputs(url: str | None, api_key: str | None) -> tuple[str, str]:
    url = url or os.environ.get(URL_ENV)
    api_key = api_key or os.environ.get(KEY_ENV)
    if url is None or api_key is None:
        # The local platform's as defaults, when there is one.
        try:
            local = resolve_server({k: v for k, v in os.environ.items()
                                    if k not in (URL_ENV, KEY_ENV)})
        except AenvError:  # no local platform: ask
            local = None
        url = url or (local.url if local else None) or typer.prompt("Server URL")
        api_key = api_key or (local.api_key if local else None) or typer.prompt(
            "API key", hide_input=True)
    if not api_key.strip():
        raise InvalidArgument("the API key is empty")
    return url, api_key.strip()


def _verify(ctx: typer.Context, server: Server) -> None:
    """:raise Unauthenticated: the key is refused. :raise Unavailable: no answer."""
    clients(ctx).api_for(server).check()
