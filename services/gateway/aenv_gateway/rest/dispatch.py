"""Which requests are sandbox traffic (spec e2b-compat Appendix A): those whose Host is
`<port>-<sandbox id>.<our domain>` (all of them, whatever the path: an app's `/sandboxes` is the
app's), or that carry `E2b-Sandbox-Id` (port from `E2b-Sandbox-Port`, default envd's) on a path
that is no control-plane route."""

from __future__ import annotations

from aenv_common.ids import is_valid_sandbox_id
from aenv_common.sandbox_routing import SandboxTarget


def target_from_host(host: str, domain: str) -> SandboxTarget | None:
    """The sandbox a Host `<port>-<sandbox id>.<domain>` names (None for `api.<domain>`)."""
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    suffix = "." + domain.lower().strip(".")
    name = name.lower()
    if not name.endswith(suffix):
        return None
    port, dash, sandbox_id = name[: -len(suffix)].partition("-")
    # ASCII digits only: isdigit() also takes "²", which int() refuses.
    if not dash or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        return None
    if not is_valid_sandbox_id(sandbox_id):
        return None
    return SandboxTarget(sandbox_id, int(port))
