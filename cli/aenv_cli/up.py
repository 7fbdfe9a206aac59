"""`aenv up`: run a Platform in the foreground until SIGINT/SIGTERM. A service that dies is
started again (a node agent re-adopts the sandboxes its predecessor left running), unless it
keeps dying: then everything stops."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import defaultdict, deque
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from aenv_cli.children import ChildProcess
from aenv_cli.edge import PublicEdge, advertised_addresses, dns_records
from aenv_cli.platform import Platform, PlatformStartError
from aenv_common.errors import AenvError

T = TypeVar("T")
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
# A service is restarted at most this often within the window; past that it is given up on.
MAX_RESTARTS = 3
RESTART_WINDOW_S = 300.0
# Built-in templates a node's first start makes after it is ready (their rootfs is built in the
# background, minutes): the ready panel names those the gateway does not list yet.
BACKGROUND_TEMPLATES = ("code-interpreter-v1",)
LISTING_TIMEOUT_S = 10.0


async def run_platform(platform: Platform, console: Console) -> int:
    """Returns the process exit code. Every child is stopped before this returns."""
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop_requested.set)
    try:
        return await _start_then_serve(platform, console, stop_requested)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


async def _start_then_serve(platform: Platform, console: Console, stop: asyncio.Event) -> int:
    console.print(f"[bold]aenv[/] starting under {platform.home} …")
    try:
        started = await _unless_stopped(platform.start(), stop)
        if started is not None:
            started.result()
    except PlatformStartError as err:
        _print_start_failure(console, platform, err)
        return EXIT_FAILED
    except AenvError as err:
        console.print(f"[red]error:[/] {err.message}")
        return EXIT_FAILED
    if started is None:
        console.print("interrupted during start-up; everything stopped")
        return EXIT_INTERRUPTED
    console.print(ready_panel(platform, await fetch_pending_templates(platform)))
    died = await _serve(platform, console, stop)
    console.print("stopping …")
    await platform.stop()
    if died is None:
        console.print("stopped")
        return EXIT_OK
    _print_death(console, died)
    return EXIT_FAILED


async def _serve(platform: Platform, console: Console, stop: asyncio.Event) -> ChildProcess | None:
    """Until `stop`: restarts services that die. Returns the one given up on (None: stopped)."""
    restarts: defaultdict[str, deque[float]] = defaultdict(deque)
    while True:
        exited = await _unless_stopped(platform.wait_for_exit(), stop)
        if exited is None:
            return None
        child = exited.result()
        recent = restarts[child.name]
        while recent and recent[0] < time.monotonic() - RESTART_WINDOW_S:
            recent.popleft()
        if len(recent) >= MAX_RESTARTS:
            console.print(f"[red]{child.name} died {MAX_RESTARTS + 1} times within "
                          f"{RESTART_WINDOW_S:.0f}s; giving up[/]")
            return child
        recent.append(time.monotonic())
        console.print(f"[yellow]{child.name} exited with code {child.returncode}; "
                      f"restarting it[/]")
        try:
            restarted = await _unless_stopped(platform.restart_service(child.name), stop)
            if restarted is None:
                return None
            restarted.result()
        except PlatformStartError as err:
            _print_start_failure(console, platform, err)
            return child
        console.print(f"{child.name} is back")


async def _unless_stopped(work: Awaitable[T], stop: asyncio.Event) -> asyncio.Future[T] | None:
    """Runs `work` until it finishes (its finished future) or `stop` is set (None; `work` is
    cancelled and has cleaned up after itself). Cancelled itself, it cancels `work` and waits
    for its cleanup too: a start left running on its own would outlive the platform's stop."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
    return None if task.cancelled() else task


async def fetch_pending_templates(platform: Platform) -> list[str]:
    """BACKGROUND_TEMPLATES not yet among the gateway's built-in ones (none if it cannot say)."""
    try:
        # The gateway is on loopback: no proxy from the environment applies.
        async with httpx.AsyncClient(base_url=platform.api_url, timeout=LISTING_TIMEOUT_S,
                                     trust_env=False,
                                     headers={"X-API-Key": platform.api_key}) as http:
            response = await http.get("/default-templates")
        response.raise_for_status()
        listed = response.json()
    except (httpx.HTTPError, ValueError):
        return []
    return pending_templates(listed if isinstance(listed, list) else [])


def pending_templates(listed: list[Any]) -> list[str]:
    """Of BACKGROUND_TEMPLATES, those no entry of `GET /default-templates` names."""
    names = {str(name) for entry in listed if isinstance(entry, dict)
             for name in entry.get("names") or [entry.get("templateID")]}
    return [template for template in BACKGROUND_TEMPLATES if template not in names]


def ready_panel(platform: Platform, pending: list[str]) -> Panel:
    body = Text()
    body.append("API URL      ", style="bold")
    body.append(platform.api_url + "\n")
    body.append("Dashboard    ", style="bold")
    body.append(platform.api_url + "/dashboard/\n")
    body.append("gRPC API     ", style="bold")
    body.append(platform.grpc_address + "\n")
    body.append("API key      ", style="bold")
    body.append(platform.api_key + "\n")
    if platform.edge is not None:
        edge = platform.edge
        body.append(edge_text(edge, platform.home, advertised_addresses(edge.listen_host)))
    body.append("\n")
    body.append("\n".join(platform.e2b_env_lines()) + "\n\n", style="green")
    body.append(f"saved to {platform.e2b_env_path} (mode 0600); use it with\n", style="dim")
    body.append(f"  set -a; . {platform.e2b_env_path}; set +a\n", style="dim")
    for template in pending:
        body.append(f"{template} ", style="bold")
        body.append("is being built in the background (a first start: minutes); `aenv status` "
                    "lists it among the node's templates when it is ready\n\n", style="yellow")
    body.append(f"logs: {platform.home / 'logs'}   Ctrl-C stops everything", style="dim")
    return Panel(body, title="aenv is running", border_style="green")


def edge_text(edge: PublicEdge, home: Path, addresses: list[str]) -> Text:
    """The HTTPS edge's part of the ready panel: where it listens, its CA, the DNS it needs."""
    body = Text()
    body.append("E2B domain   ", style="bold")
    body.append(f"https://api.{edge.domain} on {edge.listen}\n")
    own = edge.tls_files(home)
    if own is not None:
        body.append("TLS CA       ", style="bold")
        body.append(f"{own.ca} (self-signed; clients trust it with SSL_CERT_FILE={own.bundle})\n")
    body.append(f"DNS {edge.domain} needs:\n", style="bold")
    if not addresses:
        body.append(f"  api.{edge.domain} and *.{edge.domain} → this node's address\n")
    body.append("".join(f"  {line}\n" for line in dns_records(edge.domain, addresses)))
    return body


def _print_start_failure(console: Console, platform: Platform, err: PlatformStartError) -> None:
    console.print(f"[red]error:[/] {err.message}; everything stopped")
    if err.log_tail:
        log_path = platform.home / "logs" / f"{err.service}.log"
        console.print(Panel(Text(err.log_tail), title=f"tail of {log_path}", border_style="red"))


def _print_death(console: Console, child: ChildProcess) -> None:
    console.print(f"[red]error:[/] {child.name} exited with code {child.returncode}")
    tail = child.log_tail()
    if tail:
        console.print(Panel(Text(tail), title=f"tail of {child.log_path}", border_style="red"))
