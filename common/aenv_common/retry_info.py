"""When a refused request may be tried again, carried over gRPC as the standard
`google.rpc.RetryInfo` in the status details (`grpc-status-details-bin`), which gRPC clients
of any language read, and rebuilt from there on our side."""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2

DETAILS_KEY = "grpc-status-details-bin"

Metadata = tuple[tuple[str, str | bytes], ...]


def retry_metadata(code: grpc.StatusCode, message: str, retry_after_s: float) -> Metadata:
    """Trailing metadata saying "retry after `retry_after_s`" for a status of `code`."""
    delay = duration_pb2.Duration()
    delay.FromMilliseconds(int(retry_after_s * 1000))
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    status = status_pb2.Status(code=code.value[0], message=message, details=[detail])
    return ((DETAILS_KEY, status.SerializeToString()),)


def retry_after_from(metadata: Iterable[tuple[str, str | bytes]] | None) -> float | None:
    """The retry delay in a status's trailing metadata, if it carries one."""
    for key, value in metadata or ():
        if key != DETAILS_KEY or not isinstance(value, bytes):
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            info = error_details_pb2.RetryInfo()
            if detail.Unpack(info):
                return float(info.retry_delay.ToMilliseconds()) / 1000
    return None
