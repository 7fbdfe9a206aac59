"""`aenv auth key create|ls|revoke`: the server's API keys, managed with its admin (configured)
key while it runs. A new key is printed once: the server keeps only its SHA-256."""

from __future__ import annotations

from typing import Annotated

import typer

from aenv_cli.commands.context import clients
from aenv_cli.commands.failures import clean_errors
from aenv_cli.commands.output import Column, OutputOption, field, show, when

key_app = typer.Typer(no_args_is_help=True,
                      help="API keys of the server (with its admin key): create, ls, revoke.")
KEY_COLUMNS = (
    Column("KEY ID", field("keyID")),
    Column("NAME", field("name")),
    Column("CREATED", when("createdAt")),
)


@key_app.command("create")
@clean_errors
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Option(help="What the key is for (shown by ls).")] = "",
) -> None:
    """Create an API key; prints its id, then the key (shown this once).

    Example: aenv auth key create --name ci
    """
    given = clients(ctx)
    created = given.api.create_key(name)
    given.out.print(f"key id: {created.get('keyID', '')}")
    given.out.print(f"key:    {created.get('key', '')}")
    given.out.print("(shown once: the server keeps only its SHA-256)")


@key_app.command("ls")
@clean_errors
def ls(ctx: typer.Context, output: OutputOption = None) -> None:
    """List the API keys (never the keys themselves; `admin` is the configured key).

    Example: aenv auth key ls
    """
    given = clients(ctx)
    show(given.api.keys(), output, given.out, columns=KEY_COLUMNS)


@key_app.command("revoke")
@clean_errors
def revoke(
    ctx: typer.Context, key_id: Annotated[str, typer.Argument(help="The key's id.")],
) -> None:
    """Revoke an API key: refused at once, its open requests cut.

    Example: aenv auth key revoke 3f9a0c1d2b4e5f60
    """
    given = clients(ctx)
    given.api.revoke_key(key_id)
    given.out.print(f"revoked {key_id}")
