"""`aenv snapshot <id>` takes a snapshot; `aenv snapshot ls|rm` list and delete them."""

from __future__ import annotations

from typing import Annotated

import typer
from typer._click.core import Context as ClickContext  # Typer's own Click, its groups' type
from typer.core import TyperGroup

from aenv_cli.commands.context import clients
from aenv_cli.commands.failures import clean_errors
from aenv_cli.commands.output import Column, OutputOption, field, show
from aenv_cli.commands.sandboxes import IdArgument, exit_if_failed, for_each

CREATE = "create"
SNAPSHOT_COLUMNS = (
    Column("SNAPSHOT ID", field("snapshotID")),
    Column("NAMES", lambda row: ", ".join(str(n) for n in row.get("names") or [])),
)


class SnapshotGroup(TyperGroup):
    """`aenv snapshot ID` reads as `aenv snapshot create ID`: a group's first word is otherwise
    always a subcommand's name."""

    def parse_args(self, ctx: ClickContext, args: list[str]) -> list[str]:
        if args and not args[0].startswith("-") and args[0] not in self.commands:
            args = [CREATE, *args]
        return super().parse_args(ctx, args)


snapshot_app = typer.Typer(
    cls=SnapshotGroup, no_args_is_help=True,
    help="Snapshots: `aenv snapshot ID` takes one; `ls` and `rm` list and delete them.",
)


@snapshot_app.command(CREATE)
@clean_errors
def create(
    ctx: typer.Context, sandbox_id: IdArgument,
    name: Annotated[str | None, typer.Option(help="A name to create sandboxes from.")] = None,
) -> None:
    """Snapshot a running sandbox (it keeps running); prints the snapshot's id.

    Example: aenv snapshot ib0rbwk8ypuqz3fj8pk4x --name task-ready
    """
    given = clients(ctx)
    given.out.print(given.api.snapshot(sandbox_id, name).get("snapshotID", ""))


@snapshot_app.command("ls")
@clean_errors
def ls(
    ctx: typer.Context,
    sandbox: Annotated[str | None, typer.Option(help="Only of this sandbox.")] = None,
    output: OutputOption = None,
) -> None:
    """List snapshots: a table on a terminal, JSON when piped.

    Example: aenv snapshot ls --sandbox ib0rbwk8ypuqz3fj8pk4x
    """
    given = clients(ctx)
    show(given.api.snapshots(sandbox), output, given.out, columns=SNAPSHOT_COLUMNS)


@snapshot_app.command("rm")
@clean_errors
def rm(
    ctx: typer.Context,
    snapshot_ids: Annotated[list[str], typer.Argument(help="Snapshot ids.", show_default=False)],
) -> None:
    """Delete snapshots.

    Example: aenv snapshot rm snap_3fj8pk4x
    """
    given = clients(ctx)

    def delete(snapshot_id: str) -> str:
        given.api.delete_snapshot(snapshot_id)
        given.out.print(snapshot_id)
        return snapshot_id

    exit_if_failed(for_each(snapshot_ids, delete))
