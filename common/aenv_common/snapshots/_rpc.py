"""Client-side mapping of gRPC failures back to typed aenv errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc

from aenv.snapstore.v1 import snapstore_pb2_grpc as pb_grpc
from aenv_common.status_tables import from_rpc_error


def snapstore_stub(channel: grpc.aio.Channel) -> Any:
    """A SnapStoreService client on `channel` (typed Any: the generated stubs are untyped)."""
    return pb_grpc.SnapStoreServiceStub(channel)  # type: ignore[no-untyped-call]


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


@contextmanager
def typed_rpc_errors() -> Iterator[None]:
    """Raises gRPC failures as typed aenv errors; a task group's failure surfaces as its first
    error, so callers catch the same exceptions whether or not work ran concurrently."""
    try:
        yield
    except grpc.aio.AioRpcError as err:
        raise from_rpc_error(err) from err
    except BaseExceptionGroup as group:
        first = _first_leaf(group)
        if isinstance(first, grpc.aio.AioRpcError):
            raise from_rpc_error(first) from group
        raise first from group
