"""Typed errors shared by all services: kinds of failure, not protocol statuses.

Services raise these; only the edges name them on a protocol, through one table per protocol
(aenv_common.status_tables: `http_status`, `grpc_status`), and gRPC clients rebuild the same
kinds with `status_tables.from_rpc_error`, so a NotFound raised on a node agent surfaces as
NotFound in the gateway.
"""

from __future__ import annotations


class AenvError(Exception):
    """Base of every expected failure. The message is safe to show to API users."""
    # E2B's machine-readable `error_code` of the HTTP body, for the few errors SDKs branch on.
    error_code: str | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        """What a gRPC edge sends beside the status (e.g. a dead sandbox's cause); none here."""
        return ()


class InvalidArgument(AenvError):
    """The request is malformed, or asks for something impossible."""


class Unauthenticated(AenvError):
    """No valid credentials came with the request."""


class PermissionDenied(AenvError):
    """The caller may not do this."""


class NotFound(AenvError):
    """No such resource."""


class OutOfRange(AenvError):
    """Past what is kept: e.g. resuming after an event older than the retention."""


class Conflict(AenvError):
    """The resource is in a state that forbids the operation (e.g. already paused)."""


class AlreadyExists(AenvError):
    """Something of that name or id exists already."""


class Retriable(AenvError):
    """`retry_after_s`: the request may succeed when sent again this much later, sent on as
    gRPC RetryInfo and HTTP Retry-After; None: nothing is said of retrying."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ResourceExhausted(Retriable):
    """Retry after: a full or timed-out admission queue; without: nothing can ever hold it."""


def at_capacity(detail: str, retry_after_s: float) -> ResourceExhausted:
    """No room for a sandbox now, in E2B's words for a full team: the SDKs retry it after
    `retry_after_s`, and clients such as Harbor wait for room when a 429 says so."""
    return ResourceExhausted(
        f"reached the maximum number of concurrent sandboxes the cluster can run now: {detail}; "
        "retry later", retry_after_s)


class Unavailable(Retriable):
    """Retry after: e.g. a standby scheduler while a leader is elected."""


class DeadlineExceeded(AenvError):
    """The operation did not finish within the time it had."""


class Internal(AenvError):
    """The platform failed; the caller did nothing wrong."""


class Unimplemented(AenvError):
    """An operation this service knows of but does not do (a route not built yet, an NFS
    procedure a volume does not support)."""


class BadGateway(Internal):
    """An upstream a proxy relays to could not be reached or failed before answering."""


class Relayed(AenvError):
    """An upstream's own refusal passed on as it is: `status` is the HTTP status it answered."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class BodyTooLarge(AenvError):
    """A request body larger than the edge accepts."""


class RequestTimeout(AenvError):
    """A client too slow to send its request."""
