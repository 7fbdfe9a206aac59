"""Which requests are sandbox traffic (spec e2b-compat Appendix A): those carrying
`E2b-Sandbox-Id` (port from `E2b-Sandbox-Port`, default envd's), or whose Host is
`<port>-<sandbox id>.<our domain>`. Control-plane routes are matched first, elsewhere."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.datastructures import Headers

from aenv_common.errors import InvalidArgument
from aenv_common.ids import is_valid_sandbox_id

ENVD_PORT = 49983
SANDBOX_ID_HEADER = "e2b-sandbox-id"
SANDBOX_PORT_HEADER = "e2b-sandbox-port"


@dataclass(frozen=True)
class SandboxTarget:
    sandbox_id: str
    port: int


def sandbox_target(headers: Headers, domain: str | None) -> SandboxTarget | None:
    """The sandbox a request is for, or None if it is not sandbox traffic."""
    sandbox_id = headers.get(SANDBOX_ID_HEADER)
    if sandbox_id is not None:
        return SandboxTarget(sandbox_id, _port(headers.get(SANDBOX_PORT_HEADER)))
    if domain:
        return _target_from_host(headers.get("host", ""), domain)
    return None


def _port(value: str | None) -> int:
    if value is None or value == "":
        return ENVD_PORT
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise InvalidArgument(f"invalid E2b-Sandbox-Port {value!r}")
    return int(value)


def _target_from_host(host: str, domain: str) -> SandboxTarget | None:
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    suffix = "." + domain.lower().strip(".")
    name = name.lower()
    if not name.endswith(suffix):
        return None
    port, dash, sandbox_id = name[: -len(suffix)].partition("-")
    if not dash or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    if not is_valid_sandbox_id(sandbox_id):
        return None
    return SandboxTarget(sandbox_id, int(port))
