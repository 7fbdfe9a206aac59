"""`aenv top`: the newest metrics of every running sandbox, refreshed live (Rich Live)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.table import Table

from aenv_cli.api import SandboxApi
from aenv_cli.commands.context import clients
from aenv_cli.commands.failures import clean_errors
from aenv_cli.commands.output import Column, Format, OutputOption, field, show, table

MIB = 1024 * 1024
METRIC_COLUMNS = (
    Column("SANDBOX ID", field("sandboxID")),
    Column("TEMPLATE", lambda row: str(row.get("alias") or row.get("templateID") or "")),
    Column("CPUS", field("cpuCount")),
    Column("CPU %", lambda row: _percent(row)),
    Column("MEMORY", lambda row: _used(row, "memUsed", "memTotal")),
    Column("DISK", lambda row: _used(row, "diskUsed", "diskTotal")),
    Column("SAMPLED", lambda row: str(row.get("timestamp") or "no sample yet")),
)


@clean_errors
def top(
    ctx: typer.Context,
    interval: Annotated[float, typer.Option(
        "--interval", "-n", min=0.5, help="Seconds between refreshes.")] = 2.0,
    once: Annotated[bool, typer.Option("--once", help="Print once and exit.")] = False,
    output: OutputOption = None,
) -> None:
    """Live CPU, memory and disk of every running sandbox; Ctrl-C ends it.

    Example: aenv top   |   aenv top --once -o json
    """
    given = clients(ctx)
    if once or output in (Format.json, Format.yaml):
        show(sample(given.api), output, given.out, columns=METRIC_COLUMNS)
        return
    with Live(_table(sample(given.api)), console=given.out, auto_refresh=False) as live:
        while True:
            time.sleep(interval)
            live.update(_table(sample(given.api)), refresh=True)


def sample(api: SandboxApi) -> list[dict[str, Any]]:
    """Each running sandbox with its newest metrics sample merged in."""
    running = api.sandboxes(states=["running"])
    # The batch metrics route takes at most 100 ids (E2B's limit).
    latest = api.latest_metrics([str(s["sandboxID"]) for s in running][:100])
    return [{**shown, **latest.get(str(shown["sandboxID"]), {})} for shown in running]


def _table(rows: list[dict[str, Any]]) -> Table:
    return table(rows, METRIC_COLUMNS, wide=True, title=time.strftime("aenv top — %H:%M:%S"))


def _percent(row: dict[str, Any]) -> str:
    value = row.get("cpuUsedPct")
    return f"{value:.1f}" if isinstance(value, int | float) else ""


def _used(row: dict[str, Any], used: str, total: str) -> str:
    if not isinstance(row.get(used), int | float) or not row.get(total):
        return ""
    return f"{row[used] / MIB:.0f}/{row[total] / MIB:.0f} MiB"
