"""How data-plane requests name their sandbox, and the 502 answers the E2B SDKs key on.

Shared by the gateway (which also routes by Host) and the node agent's proxy, which routes by the
headers the gateway keeps on every forwarded request (spec e2b-compat §1.4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from starlette.responses import JSONResponse

from aenv_common.errors import InvalidArgument

ENVD_PORT = 49983
SANDBOX_ID_HEADER = "e2b-sandbox-id"
SANDBOX_PORT_HEADER = "e2b-sandbox-port"
# The SDKs key on these substrings: SandboxNotRunningException / SandboxUnreachableException.
NOT_FOUND_MESSAGE = "The sandbox was not found"
PORT_CLOSED_MESSAGE = "The sandbox is running but port is not open"


@dataclass(frozen=True)
class SandboxTarget:
    sandbox_id: str
    port: int

    def headers(self) -> dict[str, str]:
        """The routing headers for the next hop."""
        return {SANDBOX_ID_HEADER: self.sandbox_id, SANDBOX_PORT_HEADER: str(self.port)}


def parse_port(value: str | None) -> int:
    """`E2b-Sandbox-Port`; absent means envd's port, as upstream's proxy assumes."""
    if value is None or value == "":
        return ENVD_PORT
    # ASCII digits only: isdigit() also takes "²", which int() refuses.
    if not (value.isascii() and value.isdigit()) or not 0 < int(value) < 65536:
        raise InvalidArgument(f"invalid E2b-Sandbox-Port {value!r}")
    return int(value)


def target_from_headers(headers: Mapping[str, str]) -> SandboxTarget | None:
    sandbox_id = headers.get(SANDBOX_ID_HEADER)
    if sandbox_id is None:
        return None
    return SandboxTarget(sandbox_id, parse_port(headers.get(SANDBOX_PORT_HEADER)))


def stream_ended(sandbox_id: str) -> str:
    """What a Connect stream broken off by its sandbox's end says, in E2B's proxy's words (the
    SDKs read its `unavailable` as "probe the sandbox")."""
    return f"the connection to sandbox {sandbox_id} ended before the stream completed"


def bad_gateway(sandbox_id: str, message: str) -> JSONResponse:
    return JSONResponse({"sandboxId": sandbox_id, "message": message, "code": 502}, 502)


def sandbox_not_found(sandbox_id: str) -> JSONResponse:
    return bad_gateway(sandbox_id, NOT_FOUND_MESSAGE)


def port_not_open(sandbox_id: str) -> JSONResponse:
    return bad_gateway(sandbox_id, PORT_CLOSED_MESSAGE)
