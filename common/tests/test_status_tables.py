"""The protocol tables: each kind's HTTP and gRPC status, inheritance along the MRO, and the
reverse gRPC table clients rebuild errors with."""

from __future__ import annotations

import grpc
import pytest
from grpc.aio import AioRpcError, Metadata

from aenv_common import errors
from aenv_common.retry_info import retry_metadata
from aenv_common.status_tables import from_rpc_error, from_status, grpc_status, http_status

_CODE = grpc.StatusCode

KINDS: list[tuple[type[errors.AenvError], int, grpc.StatusCode]] = [
    (errors.InvalidArgument, 400, _CODE.INVALID_ARGUMENT),
    (errors.Unauthenticated, 401, _CODE.UNAUTHENTICATED),
    (errors.PermissionDenied, 403, _CODE.PERMISSION_DENIED),
    (errors.NotFound, 404, _CODE.NOT_FOUND),
    (errors.RequestTimeout, 408, _CODE.INTERNAL),
    (errors.Conflict, 409, _CODE.FAILED_PRECONDITION),
    (errors.AlreadyExists, 409, _CODE.ALREADY_EXISTS),
    (errors.OutOfRange, 410, _CODE.OUT_OF_RANGE),
    (errors.BodyTooLarge, 413, _CODE.INTERNAL),
    (errors.ResourceExhausted, 429, _CODE.RESOURCE_EXHAUSTED),
    (errors.Internal, 500, _CODE.INTERNAL),
    (errors.Unimplemented, 501, _CODE.UNIMPLEMENTED),
    (errors.BadGateway, 502, _CODE.INTERNAL),
    (errors.Unavailable, 503, _CODE.UNAVAILABLE),
    (errors.DeadlineExceeded, 504, _CODE.DEADLINE_EXCEEDED),
    (errors.AenvError, 500, _CODE.INTERNAL),
]


@pytest.mark.parametrize(("kind", "status", "code"), KINDS)
def test_each_kind_has_its_status_on_each_protocol(
    kind: type[errors.AenvError], status: int, code: grpc.StatusCode
) -> None:
    assert http_status(kind("x")) == status
    assert grpc_status(kind("x")) == code


def test_a_subclass_answers_as_its_kind() -> None:
    class TicketExpired(errors.PermissionDenied):
        pass

    class DiskGone(errors.Internal):
        pass

    assert (http_status(TicketExpired("x")), grpc_status(TicketExpired("x"))) == (
        403, _CODE.PERMISSION_DENIED)
    assert (http_status(DiskGone("x")), grpc_status(DiskGone("x"))) == (500, _CODE.INTERNAL)


def test_a_relayed_refusal_keeps_its_upstreams_status() -> None:
    refused = errors.Relayed("no such port", 418)
    assert http_status(refused) == 418
    assert grpc_status(refused) == _CODE.INTERNAL


@pytest.mark.parametrize(("kind", "status", "code"), [
    row for row in KINDS if row[0] not in (
        errors.AenvError, errors.RequestTimeout, errors.BodyTooLarge, errors.BadGateway,
        errors.Unimplemented)
])
def test_a_status_is_rebuilt_as_its_kind(
    kind: type[errors.AenvError], status: int, code: grpc.StatusCode
) -> None:
    rebuilt = from_status(code, "why")
    assert type(rebuilt) is kind
    assert rebuilt.message == "why"


@pytest.mark.parametrize("code", [_CODE.UNIMPLEMENTED, _CODE.UNKNOWN, _CODE.DATA_LOSS])
def test_a_code_no_rebuilt_kind_has_is_internal(code: grpc.StatusCode) -> None:
    assert type(from_status(code, "why")) is errors.Internal


def _rpc_error(code: grpc.StatusCode, details: str,
               trailing: tuple[tuple[str, str | bytes], ...] = ()) -> AioRpcError:
    return AioRpcError(code, Metadata(), Metadata(*trailing), details)


def test_an_rpc_error_carries_its_retry_delay_over() -> None:
    trailing = retry_metadata(_CODE.UNAVAILABLE, "electing", 2.5)
    rebuilt = from_rpc_error(_rpc_error(_CODE.UNAVAILABLE, "electing", trailing))
    assert isinstance(rebuilt, errors.Unavailable)
    assert (rebuilt.message, rebuilt.retry_after_s) == ("electing", 2.5)


def test_an_rpc_error_without_details_is_named_by_its_code() -> None:
    rebuilt = from_rpc_error(_rpc_error(_CODE.NOT_FOUND, ""))
    assert isinstance(rebuilt, errors.NotFound)
    assert rebuilt.message == "not_found"


def test_no_kind_carries_a_protocol_status_of_its_own() -> None:
    for kind, _, _ in KINDS:
        assert not {"http_status", "grpc_code"} & set(vars(kind)), kind
    assert not hasattr(errors.Relayed("x", 418), "http_status")
