"""The `aenv` command."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from google.protobuf.timestamp_pb2 import Timestamp
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from aenv.cluster.v1 import cluster_pb2
from aenv_cli.client import GatewayClient
from aenv_cli.commands.failures import OneLineUsageErrors, stderr
from aenv_cli.commands.register import register
from aenv_cli.commands.templates import template_gateway
from aenv_cli.edge import DEFAULT_LISTEN, PublicEdge
from aenv_cli.platform import Platform
from aenv_cli.ports import PlatformPorts
from aenv_cli.rollout_traces import render_rollout, rollout_sandboxes
from aenv_cli.status import PlatformStatus, collect_status
from aenv_cli.templates import (
    BuildRequest,
    build_template,
    list_templates,
    remove_template,
    templates_table,
)
from aenv_cli.traces import find_traces, render_trace, spans_of_trace
from aenv_cli.up import run_platform
from aenv_common.errors import AenvError
from aenv_common.logging import setup_logging
from aenv_common.telemetry import read_trace_files

T = TypeVar("T")

app = typer.Typer(help="aenv: agent sandboxes as microVMs.", no_args_is_help=True,
                  cls=OneLineUsageErrors)
sandbox_app = typer.Typer(help="Sandboxes, through the gateway's native gRPC API.")
app.add_typer(sandbox_app, name="sandbox")
template_app = typer.Typer(
    help="Templates: built from Dockerfiles through the E2B template API.", no_args_is_help=True
)
app.add_typer(template_app, name="template")
console = Console()


DEFAULT_HOME = Path.home() / ".aenv"

# The template commands' platform, when not the logged-in server.
PlatformHomeOption = Annotated[
    Path | None,
    typer.Option("--home", help="The platform `aenv up --home` runs (else the server of "
                 "`aenv auth`, AENV_URL or the local platform)."),
]
HomeOption = Annotated[
    Path,
    typer.Option(
        "--home", envvar="AENV_HOME", help="Data directory of the platform (else ~/.aenv)."
    ),
]


def _fail(message: str) -> typer.Exit:
    """One line on stderr (as every command's errors); the Exit to raise."""
    stderr.print(f"[red]error:[/] {escape(' '.join(message.split()))}")
    return typer.Exit(1)


@app.command()
def up(
    home: HomeOption = DEFAULT_HOME,
    etcd_port: Annotated[int, typer.Option(help="etcd client port (loopback).")] = 2379,
    etcd_peer_port: Annotated[int, typer.Option(help="etcd peer port (loopback).")] = 2380,
    gateway_port: Annotated[int, typer.Option(help="Gateway HTTP port (E2B API).")] = 3000,
    gateway_grpc_port: Annotated[int, typer.Option(help="Gateway native gRPC port.")] = 50050,
    domain: Annotated[
        str | None,
        typer.Option(envvar="AENV_DOMAIN", help="Serve E2B_DOMAIN-only SDKs: HTTPS for "
                     "api.<domain> and <port>-<id>.<domain> (prints the DNS it needs)."),
    ] = None,
    https_listen: Annotated[
        str, typer.Option(help="Address of the HTTPS edge (with --domain).")
    ] = DEFAULT_LISTEN,
    tls_cert: Annotated[
        Path | None, typer.Option(help="PEM certificate for <domain> and *.<domain>; "
                                  "else one from this node's own CA.")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="The certificate's PEM key.")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log the launcher.")] = False,
) -> None:
    """Start etcd and every service on this node, in the foreground; Ctrl-C stops them all.

    Example: aenv up --home ~/.aenv
    """
    setup_logging("aenv-cli", "INFO" if verbose else "WARNING", as_json=False)
    ports = PlatformPorts(
        etcd_client=etcd_port,
        etcd_peer=etcd_peer_port,
        gateway_http=gateway_port,
        gateway_grpc=gateway_grpc_port,
    )
    try:
        edge = PublicEdge(domain, https_listen, tls_cert, tls_key) if domain else None
    except AenvError as err:
        raise _fail(err.message) from None
    code = asyncio.run(run_platform(Platform(home, ports, edge=edge), console))
    raise typer.Exit(code)


@app.command()
def status(home: HomeOption = DEFAULT_HOME) -> None:
    """Are the services up; what does the node report; how many sandboxes run.

    Example: aenv status
    """
    report = asyncio.run(collect_status(home))
    console.print(_status_table(report))
    if report.node is not None:
        console.print(_node_table(report.node))
    else:
        console.print(f"node: [yellow]unavailable[/] ({report.node_error})")
    if report.sandbox_count is not None:
        console.print(f"sandboxes: {report.sandbox_count}")
    else:
        console.print(f"sandboxes: [yellow]unknown[/] ({report.sandboxes_error})")
    if not all(svc.up for svc in report.services):
        raise typer.Exit(1)


@app.command()
def trace(
    ident: Annotated[
        str | None, typer.Argument(help="A sandbox id or a trace id.")] = None,
    home: HomeOption = DEFAULT_HOME,
    show_all: Annotated[
        bool, typer.Option("--all", help="Every trace of the sandbox, not only its create.")
    ] = False,
    rollout: Annotated[str | None, typer.Option(
        "--rollout", help="Every sandbox of this rollout (metadata rollout_id), by group and "
        "step.")] = None,
    group: Annotated[str | None, typer.Option(
        "--group", help="With --rollout: only this group (metadata group_id).")] = None,
) -> None:
    """Where the time of a sandbox's create (or any trace, or a whole rollout) went, span by span.

    Example: aenv trace ib0rbwk8ypuqz3fj8pk4x --all; aenv trace --rollout r-17 --group g-3
    """
    if (ident is None) == (rollout is None) or (group is not None and rollout is None):
        raise _fail("give a sandbox or trace id, or --rollout (with --group, optionally)")
    spans = read_trace_files(home / "traces")
    try:
        if rollout is not None:
            console.print(render_rollout(rollout, rollout_sandboxes(spans, rollout, group)))
            return
        assert ident is not None
        trace_ids = find_traces(spans, ident)
    except AenvError as err:
        raise _fail(err.message) from None
    for trace_id in trace_ids if show_all else trace_ids[:1]:
        console.print(render_trace(spans_of_trace(spans, trace_id)))


@sandbox_app.command("list")
def sandbox_list(home: HomeOption = DEFAULT_HOME) -> None:
    """The sandboxes the gateway knows (through the native gRPC API; see also `aenv ls`).

    Example: aenv sandbox list --home ~/.aenv
    """
    sandboxes = _run_client(home, lambda client: client.list_sandboxes())
    table = Table("id", "template", "state", "node", "started", "ends", title="sandboxes")
    for record in sandboxes:
        table.add_row(
            record.sandbox_id,
            record.template_id,
            cluster_pb2.SandboxState.Name(record.state).removeprefix("SANDBOX_STATE_").lower(),
            record.node_id,
            _when(record.started_at),
            _when(record.end_at),
        )
    console.print(table)


@sandbox_app.command("kill")
def sandbox_kill(
    sandbox_id: Annotated[str, typer.Argument(help="The sandbox to kill.")],
    home: HomeOption = DEFAULT_HOME,
) -> None:
    """Kill a sandbox (see also `aenv rm`).

    Example: aenv sandbox kill ib0rbwk8ypuqz3fj8pk4x
    """
    _run_client(home, lambda client: client.kill_sandbox(sandbox_id))
    console.print(f"killed {sandbox_id}")


@template_app.command("build")
def template_build(
    ctx: typer.Context,
    dockerfile: Annotated[Path, typer.Option("--file", "-f", help="The Dockerfile.")],
    name: Annotated[str, typer.Option(help="The template's name (`name` or `name:tag`).")],
    context: Annotated[
        Path | None, typer.Option(help="Folder of the COPY sources (else the Dockerfile's).")
    ] = None,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", help="Another tag of the build (repeatable).")
    ] = None,
    cpu: Annotated[int | None, typer.Option(help="vCPUs of the template's sandboxes.")] = None,
    memory_mb: Annotated[
        int | None, typer.Option(help="Memory of the template's sandboxes, MiB.")
    ] = None,
    skip_cache: Annotated[
        bool, typer.Option("--skip-cache", help="Build again even if nothing changed.")
    ] = False,
    home: PlatformHomeOption = None,
) -> None:
    """Build a template from a Dockerfile (with the official e2b SDK), streaming its log.

    Example: aenv template build -f Dockerfile --name python-dev --tag v1
    """
    request = BuildRequest(dockerfile, name, context, tuple(tag or ()), cpu, memory_mb,
                           skip_cache)
    try:
        built = build_template(template_gateway(ctx, home), request, console)
    except AenvError as err:
        raise _fail(err.message) from None
    console.print(f"[green]built[/] {escape(built.name)}: template id {built.template_id}, "
                  f"build id {built.build_id}")


@template_app.command("ls")
def template_ls(ctx: typer.Context, home: PlatformHomeOption = None) -> None:
    """The templates of the platform.

    Example: aenv template ls
    """
    try:
        rows = list_templates(template_gateway(ctx, home))
    except AenvError as err:
        raise _fail(err.message) from None
    console.print(templates_table(rows))


@template_app.command("rm")
def template_rm(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The template's name or id.")],
    home: PlatformHomeOption = None,
) -> None:
    """Delete a template and its builds.

    Example: aenv template rm python-dev
    """
    try:
        remove_template(template_gateway(ctx, home), name)
    except AenvError as err:
        raise _fail(err.message) from None
    console.print(f"removed {escape(name)}")


register(app, template_app)


def _run_client(home: Path, call: Callable[[GatewayClient], Awaitable[T]]) -> T:
    async def run() -> T:
        async with GatewayClient.for_home(home) as client:
            return await call(client)

    try:
        return asyncio.run(run())
    except FileNotFoundError:
        raise _fail(f"no API key under {home}: is `aenv up --home {home}` running?") from None
    except AenvError as err:
        raise _fail(err.message) from None


def _when(stamp: Timestamp) -> str:
    if stamp.seconds == 0 and stamp.nanos == 0:  # unset
        return ""
    return datetime.fromtimestamp(stamp.seconds, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _status_table(report: PlatformStatus) -> Table:
    running = f"pid {report.launcher_pid}" if report.launcher_pid else "not running"
    table = Table("service", "health check", "state", title=f"aenv on {report.home} ({running})")
    for svc in report.services:
        state = "[green]up[/]" if svc.up else "[red]down[/]"
        table.add_row(svc.name, svc.probe, state)
    return table


def _node_table(node: cluster_pb2.NodeRecord) -> Table:
    table = Table("node", "accelerator", "kernel", "VMM confinement", "vCPUs", "memory",
                  "sandboxes", "templates")
    unconfined = node.confinement.startswith("unconfined")
    table.add_row(
        node.node_id,
        node.accelerator,
        node.kernel_version,
        f"[red]{node.confinement}[/]" if unconfined else node.confinement,
        f"{node.allocated.vcpus}/{node.capacity.vcpus}",
        f"{node.allocated.memory_mib}/{node.capacity.memory_mib} MiB",
        str(node.sandbox_count),
        ", ".join(node.cached_templates),
    )
    return table
