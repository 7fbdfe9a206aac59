"""`aenv template`: build templates from a Dockerfile through the official e2b SDK, list and
remove them through the gateway's E2B template API (`GET /templates`, `DELETE /templates/{id}`).

The platform is the one `aenv up --home home` started: the gateway's loopback HTTP port from
`platform.json`, its API key from `<home>/api-key`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from e2b import (
    AuthenticationException,
    BuildException,
    SandboxException,
    ServiceBusyException,
    Template,
)
from e2b.template.logger import LogEntry, LogEntryEnd, LogEntryStart
from e2b.template.main import TemplateBuilder
from rich.console import Console
from rich.table import Table
from rich.text import Text

from aenv_cli.api import answered_error
from aenv_cli.files import read_api_key
from aenv_cli.ports import address
from aenv_cli.state import load_ports
from aenv_common.errors import (
    AenvError,
    InvalidArgument,
    NotFound,
    Unauthenticated,
    Unavailable,
)

HTTP_TIMEOUT_S = 30.0
API_KEY_HEADER = "X-API-Key"
# The levels of build lines shown (the SDK's own bookkeeping lines are debug).
SHOWN_LEVELS = {"info": "cyan", "warn": "yellow", "error": "red"}


# What a build's log entries go to as they come.
BuildLogs = Callable[[LogEntry], None]


class BuildFailed(AenvError):
    """The build did not produce a template: the SDK's message (it names the failing step)."""


@dataclass(frozen=True)
class Gateway:
    """Where a server's template API answers, and the key it takes; `home` names the local
    platform it is (None: a server of `aenv auth`), for what an error tells to do."""

    home: Path | None
    api_url: str
    api_key: str

    @classmethod
    def of_home(cls, home: Path) -> Gateway:
        """:raise Unavailable: no API key under `home` (the platform never started there)."""
        try:
            api_key = read_api_key(home)
        except FileNotFoundError:
            raise Unavailable(
                f"no API key under {home}: is `aenv up --home {home}` running?") from None
        return cls(home, f"http://{address(load_ports(home).gateway_http)}", api_key)

    def unreachable(self) -> Unavailable:
        hint = f": is `aenv up --home {self.home}` running?" if self.home else ""
        return Unavailable(f"cannot reach the aenv server at {self.api_url}{hint}")


@dataclass(frozen=True)
class BuildRequest:
    dockerfile: Path
    name: str
    context: Path | None = None  # None: the Dockerfile's folder
    tags: Sequence[str] = ()
    cpu_count: int | None = None
    memory_mb: int | None = None
    skip_cache: bool = False


@dataclass(frozen=True)
class BuiltTemplate:
    name: str
    template_id: str
    build_id: str
    tags: list[str]


class BuildLogPrinter:
    """An `on_build_logs` callback: each line of the build on the console as it comes
    (`elapsed | time LEVEL message`, as the SDK's default_build_logger prints them)."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._started = datetime.now(UTC)

    def __call__(self, entry: LogEntry) -> None:
        if isinstance(entry, LogEntryStart):
            self._started = datetime.now(UTC)
            return
        if isinstance(entry, LogEntryEnd) or entry.level not in SHOWN_LEVELS:
            return
        elapsed = (datetime.now(UTC) - self._started).total_seconds()
        moment = entry.timestamp.astimezone().strftime("%H:%M:%S")
        # A Text, never markup: build output may hold anything, `[` included.
        self._console.print(Text.assemble(
            f"{elapsed:.1f}s".ljust(6), "| ", (moment, "dim"), " ",
            (entry.level.upper().ljust(5), SHOWN_LEVELS[entry.level]), " ", entry.message,
        ))


def build_template(gateway: Gateway, request: BuildRequest, console: Console) -> BuiltTemplate:
    """Builds `request.dockerfile` as template `request.name`, printing the build's lines.

    :raise InvalidArgument: no such Dockerfile or context, or the Dockerfile is not supported.
    :raise BuildFailed: the build (or its request) failed. :raise Unauthenticated: wrong key.
    :raise Unavailable: the gateway does not answer.
    """
    dockerfile = request.dockerfile.expanduser().absolute()
    if not dockerfile.is_file():
        # The SDK would take the string itself for a Dockerfile's content.
        raise InvalidArgument(f"no Dockerfile at {request.dockerfile}")
    context = (request.context or dockerfile.parent).expanduser().absolute()
    if not context.is_dir():
        raise InvalidArgument(f"the build context {context} is not a folder")
    try:
        template = Template(file_context_path=str(context)).from_dockerfile(str(dockerfile))
    except (ValueError, OSError) as err:  # the Dockerfile's syntax
        raise InvalidArgument(f"{dockerfile}: {err}") from None
    return run_build(gateway, template, request, BuildLogPrinter(console), what=str(dockerfile))


def pull_image(gateway: Gateway, image: str, request: BuildRequest,
               logs: BuildLogs) -> BuiltTemplate:
    """Builds template `request.name` from a registry image (the SDK's `from_image`; the
    request's `dockerfile` and `context` are unused); the node pulls it, every layer once.

    :raise BuildFailed, Unauthenticated, Unavailable: as `build_template`.
    """
    return run_build(gateway, Template().from_image(image), request, logs, what=image)


def run_build(gateway: Gateway, template: TemplateBuilder, request: BuildRequest,
              logs: BuildLogs, *, what: str) -> BuiltTemplate:
    """`Template.build` of `template` as `request` names and sizes it, through the gateway,
    each of its log entries to `logs` as it comes."""
    try:
        info = Template.build(
            template, request.name, tags=list(request.tags) or None,
            cpu_count=request.cpu_count, memory_mb=request.memory_mb,
            skip_cache=request.skip_cache, on_build_logs=logs,
            api_url=gateway.api_url, api_key=gateway.api_key,
        )
    except (BuildException, SandboxException, ServiceBusyException) as err:
        raise BuildFailed(str(err) or type(err).__name__) from None
    except AuthenticationException as err:
        raise Unauthenticated(f"the server at {gateway.api_url} refused the API key: {err}") \
            from None
    except httpx.TransportError:
        raise gateway.unreachable() from None
    except (ValueError, OSError) as err:  # a COPY source
        raise InvalidArgument(f"{what}: {err}") from None
    return BuiltTemplate(info.name, info.template_id, info.build_id, list(info.tags))


@dataclass(frozen=True)
class TemplateRow:
    names: list[str]
    template_id: str
    status: str
    cpu_count: int
    memory_mb: int
    build_count: int
    updated_at: str


def list_templates(gateway: Gateway) -> list[TemplateRow]:
    """The templates of the catalog (`GET /templates`), as the gateway orders them.

    :raise Unauthenticated, Unavailable, AenvError: as the gateway answers.
    """
    listed = _request(gateway, "GET", "/templates").json()
    if not isinstance(listed, list):
        raise Unavailable(f"the gateway at {gateway.api_url} answered no template list")
    return [_row(shown) for shown in listed if isinstance(shown, dict)]


def remove_template(gateway: Gateway, name: str) -> None:
    """Deletes a template (by name or id) and its builds.

    :raise NotFound: no such template. :raise Conflict, AenvError: as the gateway answers.
    """
    try:
        _request(gateway, "DELETE", f"/templates/{quote(name, safe='')}")
    except NotFound:
        raise NotFound(f"no template '{name}'") from None


def templates_table(rows: Sequence[TemplateRow]) -> Table:
    table = Table("names", "template id", "status", "cpu", "memory", "builds", "updated",
                  title="templates")
    for row in rows:
        table.add_row(
            Text(", ".join(row.names)), row.template_id, row.status, str(row.cpu_count),
            f"{row.memory_mb} MiB", str(row.build_count), row.updated_at,
        )
    return table


def _row(shown: Mapping[str, Any]) -> TemplateRow:
    names = shown.get("names") or shown.get("aliases") or []
    return TemplateRow(
        names=[str(n) for n in names],
        template_id=str(shown.get("templateID", "")),
        status=str(shown.get("buildStatus", "")),
        cpu_count=int(shown.get("cpuCount") or 0),
        memory_mb=int(shown.get("memoryMB") or 0),
        build_count=int(shown.get("buildCount") or 0),
        updated_at=_when(str(shown.get("updatedAt") or "")),
    )


def _when(stamp: str) -> str:
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _request(gateway: Gateway, method: str, path: str) -> httpx.Response:
    """One call to the gateway; an error status raises the typed error with its message."""
    try:
        # The gateway is on loopback: no proxy from the environment applies.
        with httpx.Client(base_url=gateway.api_url, timeout=HTTP_TIMEOUT_S, trust_env=False,
                          headers={API_KEY_HEADER: gateway.api_key}) as http:
            response = http.request(method, path)
    except httpx.TransportError:
        raise gateway.unreachable() from None
    if response.is_success:
        return response
    raise answered_error(response)
