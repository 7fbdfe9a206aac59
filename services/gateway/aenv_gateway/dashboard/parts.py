"""What the dashboard is built over, passed in by the composition root: the gateway's own
operations (it lists, kills, pauses and reads through them, never around them)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_gateway.cluster.directory import ClusterView
from aenv_gateway.core.events.deaths import Deaths
from aenv_gateway.core.events.reader import EventReader
from aenv_gateway.core.events.stream import EventHub
from aenv_gateway.core.sandbox_metrics import SandboxMetrics
from aenv_gateway.core.sandboxes import SandboxService
from aenv_gateway.core.templates.catalog import TemplateCatalog
from aenv_gateway.keys.auth import ApiKeyAuth

# A sandbox's console logs as the API reads them (the REST edge's SandboxLogs.read).
LogReader = Callable[[str, nodeagent_pb2.GetSandboxLogsRequest],
                     Awaitable[list[nodeagent_pb2.SandboxLogEntry]]]


@dataclass(frozen=True)
class DashboardParts:
    service: SandboxService
    auth: ApiKeyAuth
    view: ClusterView
    metrics: SandboxMetrics
    logs: LogReader
    catalog: TemplateCatalog
    events: EventReader
    hub: EventHub
    # A dead sandbox's page says why it died (its certificate), as the API's 404 does.
    deaths: Deaths
    # How long a resume from the dashboard lets the sandbox live.
    resume_timeout_s: int
    # Where the services' JSON-lines spans are (None: the gateway keeps none to read).
    trace_dir: Path | None = None
    session_ttl_s: float = 8 * 3600
    page_size: int = 50
