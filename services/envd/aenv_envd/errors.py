"""envd's errors: a kind (its Connect code) and a message; the edges name them on HTTP through
status_table."""

from __future__ import annotations

# The kinds of failure, named by their Connect codes (the protocol envd's clients speak); what
# each is on HTTP is status_table's.
CONNECT_CODES = frozenset({
    "canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found",
    "already_exists", "permission_denied", "resource_exhausted", "failed_precondition",
    "aborted", "out_of_range", "unimplemented", "internal", "unavailable", "data_loss",
    "unauthenticated",
})


UNAUTHORIZED_MESSAGE = (
    "unauthorized access, please provide a valid access token or method signing if supported"
)


class EnvdError(Exception):
    """An expected failure, reported to the client as a Connect error or an HTTP error body."""

    def __init__(self, code: str, message: str) -> None:
        if code not in CONNECT_CODES:
            raise ValueError(f"unknown connect code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message


class NoSpace(EnvdError):
    """The guest's disk has no room for a write (HTTP says so apart from other exhaustion)."""

    def __init__(self, message: str) -> None:
        super().__init__("resource_exhausted", message)


class UnsupportedEncoding(EnvdError):
    """A request body in a content encoding envd does not decode."""

    def __init__(self, message: str) -> None:
        super().__init__("invalid_argument", message)


def invalid_argument(message: str) -> EnvdError:
    return EnvdError("invalid_argument", message)


def not_found(message: str) -> EnvdError:
    return EnvdError("not_found", message)


def unauthenticated(message: str) -> EnvdError:
    return EnvdError("unauthenticated", message)


def internal(message: str) -> EnvdError:
    return EnvdError("internal", message)
