"""How listings are shown, as kubectl shows them: a table on a terminal, JSON when piped, or
what `--output json|yaml|wide|table` asks. Machine formats print the server's JSON as is."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table
from rich.text import Text


class Format(StrEnum):
    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"


OutputOption = Annotated[
    Format | None,
    typer.Option("--output", "-o", help="table (on a terminal), wide, json (when piped), yaml."),
]


@dataclass(frozen=True)
class Column:
    title: str
    value: Callable[[dict[str, Any]], str]
    wide_only: bool = False


def chosen(output: Format | None, console: Console) -> Format:
    if output is not None:
        return output
    return Format.table if console.is_terminal else Format.json


def show(items: Any, output: Format | None, console: Console, *, columns: Sequence[Column],
         title: str | None = None) -> None:
    """`items` (a list of the server's objects, or one object) in the chosen format."""
    fmt = chosen(output, console)
    if fmt is Format.json:
        print_data(json.dumps(items, indent=2, sort_keys=True))
    elif fmt is Format.yaml:
        print_data(yaml.safe_dump(items, sort_keys=True).rstrip("\n"))
    else:
        rows = items if isinstance(items, list) else [items]
        console.print(table(rows, columns, wide=fmt is Format.wide, title=title))


def table(rows: Sequence[dict[str, Any]], columns: Sequence[Column], *, wide: bool,
          title: str | None = None) -> Table:
    shown = [c for c in columns if wide or not c.wide_only]
    out = Table(*(c.title for c in shown), title=title, box=None, header_style="bold")
    for row in rows:
        # Text, never markup: names and metadata may hold `[`.
        out.add_row(*(Text(c.value(row)) for c in shown))
    return out


def print_data(text: str) -> None:
    """Machine-readable output: exactly the text, no wrapping or colour."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def field(name: str) -> Callable[[dict[str, Any]], str]:
    return lambda row: "" if row.get(name) is None else str(row.get(name))


def when(name: str) -> Callable[[dict[str, Any]], str]:
    """An RFC 3339 field as a short local-independent UTC time."""

    def value(row: dict[str, Any]) -> str:
        stamp = str(row.get(name) or "")
        try:
            moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            return stamp
        return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")

    return value


def pairs(name: str) -> Callable[[dict[str, Any]], str]:
    def value(row: dict[str, Any]) -> str:
        shown = row.get(name)
        if not isinstance(shown, dict):
            return ""
        return ",".join(f"{k}={v}" for k, v in sorted(shown.items()))

    return value
