"""The one error type of envd: a Connect error code plus message, mapped to HTTP statuses."""

from __future__ import annotations

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


UNAUTHORIZED_MESSAGE = (
    "unauthorized access, please provide a valid access token or method signing if supported"
)


class EnvdError(Exception):
    """An expected failure, reported to the client as a Connect error or an HTTP error body."""

    def __init__(self, code: str, message: str, http_status: int | None = None) -> None:
        if code not in CONNECT_CODE_TO_HTTP:
            raise ValueError(f"unknown connect code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.http_status = http_status or CONNECT_CODE_TO_HTTP[code]


def invalid_argument(message: str) -> EnvdError:
    return EnvdError("invalid_argument", message)


def not_found(message: str) -> EnvdError:
    return EnvdError("not_found", message)


def unauthenticated(message: str) -> EnvdError:
    return EnvdError("unauthenticated", message)


def internal(message: str) -> EnvdError:
    return EnvdError("internal", message)
