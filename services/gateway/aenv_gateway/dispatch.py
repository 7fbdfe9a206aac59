"""Which requests are sandbox traffic (spec e2b-compat Appendix A): those carrying
`E2b-Sandbox-Id` (port from `E2b-Sandbox-Port`, default envd's), or whose Host is
`<port>-<sandbox id>.<our domain>`. Control-plane routes are matched first, elsewhere."""

from __future__ import annotations

from starlette.datastructures import Headers

from aenv_common.ids import is_valid_sandbox_id
from aenv_common.sandbox_routing import SandboxTarget, target_from_headers


def sandbox_target(headers: Headers, domain: str | None) -> SandboxTarget | None:
    """The sandbox a request is for, or None if it is not sandbox traffic."""
    target = target_from_headers(headers)
    if target is None and domain:
        return _target_from_host(headers.get("host", ""), domain)
    return target


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
