"""What envd's errors are on HTTP, for its two HTTP edges (the file routes' error bodies and
Connect's unary error responses): by kind first, then by Connect code."""

from __future__ import annotations

from .errors import EnvdError, NoSpace, UnsupportedEncoding

# Connect code -> HTTP status (Connect protocol spec; e2b-compat §3.2.5).
CONNECT_CODE_TO_HTTP: dict[str, int] = {
    "canceled": 499,
    "unknown": 500,
    "invalid_argument": 400,
    "deadline_exceeded": 504,
    "not_found": 404,
    "already_exists": 409,
    "permission_denied": 403,
    "resource_exhausted": 429,
    "failed_precondition": 400,
    "aborted": 409,
    "out_of_range": 400,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "data_loss": 500,
    "unauthenticated": 401,
}

# Kinds HTTP names apart from their code, as upstream envd answers them.
_KIND_TO_HTTP: dict[type[EnvdError], int] = {
    NoSpace: 507,
    UnsupportedEncoding: 415,
}


def http_status(error: EnvdError) -> int:
    """The HTTP status of `error`: its kind's (along its MRO), else its Connect code's."""
    for cls in type(error).__mro__:
        if cls in _KIND_TO_HTTP:
            return _KIND_TO_HTTP[cls]
    return CONNECT_CODE_TO_HTTP[error.code]
