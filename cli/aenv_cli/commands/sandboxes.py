"""Sandbox commands over the gateway's REST API: ls, inspect, pause, resume, rm, timeout, fork,
reset, logs. Commands of several ids go on past a failed one and exit non-zero (as `docker rm`)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.markup import escape

from aenv_cli.commands.context import clients
from aenv_cli.commands.failures import EXIT_FAILURE, clean_errors, stderr
from aenv_cli.commands.output import Column, Format, OutputOption, field, pairs, show, when
from aenv_common.errors import AenvError, InvalidArgument, NotFound

IdsArgument = Annotated[list[str], typer.Argument(help="Sandbox ids.", show_default=False)]
IdArgument = Annotated[str, typer.Argument(help="The sandbox id.", show_default=False)]

SANDBOX_COLUMNS = (
    Column("SANDBOX ID", field("sandboxID")),
    Column("TEMPLATE", lambda row: str(row.get("alias") or row.get("templateID") or "")),
    Column("STATE", field("state")),
    Column("STARTED", when("startedAt")),
    Column("ENDS", when("endAt")),
    Column("CPU", field("cpuCount"), wide_only=True),
    Column("MEMORY MB", field("memoryMB"), wide_only=True),
    Column("NODE", field("clientID"), wide_only=True),
    Column("METADATA", pairs("metadata"), wide_only=True),
)
# Secrets of a sandbox's envd and traffic are not for a screen or a log.
SECRET_FIELDS = ("envdAccessToken", "trafficAccessToken")
_DURATION = re.compile(r"(\d+)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# How often `logs --follow` asks for new entries (tests replace the wait).
FOLLOW_POLL_S = 1.0
wait_between_polls = time.sleep


@clean_errors
def ls(
    ctx: typer.Context,
    state: Annotated[list[str] | None, typer.Option(
        "--state", help="running or paused (repeatable; default both).")] = None,
    template: Annotated[str | None, typer.Option(
        help="Only of this template (name or id).")] = None,
    metadata: Annotated[list[str] | None, typer.Option(
        "--metadata", "-m", help="Only with this KEY=VALUE metadata (repeatable).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the ids.")] = False,
    output: OutputOption = None,
) -> None:
    """List sandboxes: a table on a terminal, JSON when piped.

    Example: aenv ls --state running -m team=rl -o json
    """
    given = clients(ctx)
    listed = given.api.sandboxes(states=state, template=template,
                            metadata=parse_pairs(metadata or [], "--metadata"))
    if quiet:
        for row in listed:
            given.out.print(row.get("sandboxID", ""))
        return
    show(listed, output, given.out, columns=SANDBOX_COLUMNS)


@clean_errors
def inspect(
    ctx: typer.Context, sandbox_ids: IdsArgument,
    output: Annotated[Format, typer.Option("--output", "-o", help="json or yaml.")] = Format.json,
) -> None:
    """Everything the server says of sandboxes (JSON, as `docker inspect`).

    Example: aenv inspect ib0rbwk8ypuqz3fj8pk4x
    """
    given = clients(ctx)
    shown = for_each(sandbox_ids, lambda sid: _public(given.api.get(sid)))
    if output not in (Format.json, Format.yaml):
        raise InvalidArgument("inspect shows json or yaml")
    show([s for s in shown if s is not None], output, given.out, columns=SANDBOX_COLUMNS)
    exit_if_failed(shown)


@clean_errors
def pause(ctx: typer.Context, sandbox_ids: IdsArgument) -> None:
    """Pause running sandboxes (memory and disk kept; `aenv resume` continues them).

    Example: aenv pause ib0rbwk8ypuqz3fj8pk4x
    """
    given = clients(ctx)
    exit_if_failed(for_each(sandbox_ids, lambda sid: _said(given.out, sid, given.api.pause)))


@clean_errors
def resume(
    ctx: typer.Context, sandbox_ids: IdsArgument,
    timeout: Annotated[str | None, typer.Option(help="New time to live, e.g. 30m.")] = None,
) -> None:
    """Resume paused sandboxes.

    Example: aenv resume ib0rbwk8ypuqz3fj8pk4x --timeout 1h
    """
    given = clients(ctx)
    seconds = parse_duration(timeout) if timeout else None
    exit_if_failed(for_each(
        sandbox_ids, lambda sid: _said(given.out, sid, lambda s: given.api.resume(s, seconds))))


@clean_errors
def rm(ctx: typer.Context, sandbox_ids: IdsArgument) -> None:
    """Kill sandboxes (running or paused); their state is gone.

    Example: aenv rm ib0rbwk8ypuqz3fj8pk4x i7q0hzn1c5x2rwvd9m3a
    """
    given = clients(ctx)
    exit_if_failed(for_each(sandbox_ids, lambda sid: _said(given.out, sid, given.api.kill)))


@clean_errors
def timeout(
    ctx: typer.Context, sandbox_id: IdArgument,
    duration: Annotated[str, typer.Argument(help="From now: 90, 90s, 30m, 2h, 1h30m.")],
) -> None:
    """Set how long a sandbox lives from now (then it is killed, or paused if so created).

    Example: aenv timeout ib0rbwk8ypuqz3fj8pk4x 30m
    """
    given = clients(ctx)
    given.api.set_timeout(sandbox_id, parse_duration(duration))
    given.out.print(sandbox_id)


@clean_errors
def fork(
    ctx: typer.Context, sandbox_id: IdArgument,
    count: Annotated[int, typer.Option("--count", "-n", min=1, help="How many children.")] = 1,
    # The API's default (15 s) suits a program that uses its children at once, not a person.
    timeout: Annotated[str, typer.Option(help="The children's time to live.")] = "5m",
    output: OutputOption = None,
) -> None:
    """Clone a running sandbox N times (memory, disk, processes); prints the children's ids.

    Example: aenv fork ib0rbwk8ypuqz3fj8pk4x -n 4
    """
    given = clients(ctx)
    results = given.api.fork(sandbox_id, count, parse_duration(timeout))
    children = [r["sandbox"] for r in results if isinstance(r.get("sandbox"), dict)]
    for failed in (r["error"] for r in results if isinstance(r.get("error"), dict)):
        stderr.print(f"[red]error:[/] a child failed: {escape(str(failed.get('message')))}")
    if output is None or output is Format.table:
        for child in children:
            given.out.print(child.get("sandboxID", ""))
    else:
        show([_public(c) for c in children], output, given.out, columns=SANDBOX_COLUMNS)
    if len(children) < len(results):
        raise typer.Exit(EXIT_FAILURE)


@clean_errors
def reset(
    ctx: typer.Context, sandbox_id: IdArgument,
    snapshot_id: Annotated[str, typer.Argument(help="The snapshot to rewind to.")],
) -> None:
    """Rewind a sandbox in place to a snapshot (same id and address).

    Example: aenv reset ib0rbwk8ypuqz3fj8pk4x snap_3fj8pk4x
    """
    given = clients(ctx)
    given.api.reset(sandbox_id, snapshot_id)
    given.out.print(sandbox_id)


@clean_errors
def logs(
    ctx: typer.Context, sandbox_id: IdArgument,
    follow: Annotated[bool, typer.Option(
        "--follow", "-f", help="Keep printing new entries until the sandbox ends (Ctrl-C).")
    ] = False,
    output: OutputOption = None,
) -> None:
    """The sandbox's log: its guest console and envd's lines, oldest first.

    Example: aenv logs ib0rbwk8ypuqz3fj8pk4x --follow
    """
    given = clients(ctx)
    entries = given.api.logs(sandbox_id)
    if not follow:
        if output in (Format.json, Format.yaml):
            show(entries, output, given.out, columns=())
        else:
            _print_entries(given.out, entries, output)
        return
    tail = LogTail()
    _print_entries(given.out, tail.fresh(entries), output)
    while True:
        wait_between_polls(FOLLOW_POLL_S)
        try:
            entries = given.api.logs(sandbox_id, since_ms=tail.since_ms)
        except NotFound:
            stderr.print(f"sandbox {escape(sandbox_id)} ended")
            return
        _print_entries(given.out, tail.fresh(entries), output)


class LogTail:
    """What `logs --follow` printed: the newest millisecond seen, and the entries of that
    millisecond (asked for again from it on, so none of the same millisecond is lost)."""

    def __init__(self) -> None:
        self.since_ms = 0
        self._at_edge: set[tuple[str, str]] = set()

    def fresh(self, entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        fresh = []
        for entry in entries:
            stamp = str(entry.get("timestamp", ""))
            ident = (stamp, str(entry.get("message", "")))
            ms = _epoch_ms(stamp)
            if ident in self._at_edge or ms < self.since_ms:
                continue
            if ms > self.since_ms:
                self.since_ms, self._at_edge = ms, set()
            self._at_edge.add(ident)
            fresh.append(entry)
        return fresh


def _print_entries(out: Any, entries: Sequence[dict[str, Any]], output: Format | None) -> None:
    for entry in entries:
        if output in (Format.json, Format.yaml):  # one JSON object a line, as they come
            out.print(json.dumps(entry), markup=False, highlight=False, soft_wrap=True)
        else:
            out.print(f"{when('timestamp')(entry)} {entry.get('level', ''):5} "
                      f"{entry.get('message', '')}", markup=False)


def _epoch_ms(stamp: str) -> int:
    try:
        return int(datetime.fromisoformat(stamp).timestamp() * 1000)
    except ValueError:
        return 0


def for_each(ids: Sequence[str], act: Callable[[str], Any]) -> list[Any]:
    """`act` on each id; a failed one is reported (one line) and left None, the rest go on."""
    results: list[Any] = []
    for sandbox_id in ids:
        try:
            results.append(act(sandbox_id))
        except AenvError as err:
            stderr.print(f"[red]error:[/] {escape(sandbox_id)}: {escape(err.message)}")
            results.append(None)
    return results


def parse_duration(text: str) -> int:
    """`90`, `90s`, `30m`, `2h`, `1d`, `1h30m` → seconds.

    :raise InvalidArgument: anything else.
    """
    cleaned = text.strip().lower()
    if cleaned.isdigit():
        return int(cleaned)
    parts = _DURATION.findall(cleaned)
    if not parts or "".join(n + u for n, u in parts) != cleaned:
        raise InvalidArgument(f"not a duration: {text!r} (e.g. 90, 90s, 30m, 2h, 1h30m)")
    return sum(int(n) * _UNIT_S[u] for n, u in parts)


def parse_pairs(items: Sequence[str], option: str) -> dict[str, str]:
    """`KEY=VALUE` items → a dict. :raise InvalidArgument: an item without `=`."""
    parsed: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidArgument(f"{option} takes KEY=VALUE, not {item!r}")
        parsed[key] = value
    return parsed


def _public(shown: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in shown.items() if k not in SECRET_FIELDS}


def _said(out: Any, sandbox_id: str, act: Callable[[str], object]) -> str:
    act(sandbox_id)
    out.print(sandbox_id)
    return sandbox_id


def exit_if_failed(results: Sequence[Any]) -> None:
    if any(r is None for r in results):
        raise typer.Exit(EXIT_FAILURE)
