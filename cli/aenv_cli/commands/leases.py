"""`aenv leases`: the key's experiment leases (docs/leases.md) — when each lapses unless its
holder renews it, what the lapse does, and how many sandboxes live under it."""

from __future__ import annotations

import typer

from aenv_cli.commands.context import clients
from aenv_cli.commands.failures import clean_errors
from aenv_cli.commands.output import Column, OutputOption, field, show, when

LEASE_COLUMNS = (
    Column("LEASE ID", field("leaseID")),
    Column("NAME", field("name")),
    Column("ON EXPIRY", field("onExpiry")),
    Column("TTL", lambda row: f"{row.get('ttlSeconds', '')}s"),
    Column("EXPIRES (UTC)", when("expiresAt")),
    Column("SANDBOXES", field("sandboxCount")),
    Column("CREATED (UTC)", when("createdAt"), wide_only=True),
)


@clean_errors
def leases(ctx: typer.Context, output: OutputOption = None) -> None:
    """List the key's live leases: a table on a terminal, JSON when piped.

    Example: aenv leases -o wide
    """
    given = clients(ctx)
    show(given.api.leases(), output, given.out, columns=LEASE_COLUMNS)
