"""Records are stored in etcd as binary protobuf (upb: ~1 us per message)."""

from __future__ import annotations

from typing import TypeVar

from google.protobuf.message import DecodeError, Message

from aenv_common import errors

M = TypeVar("M", bound=Message)


def encode(record: Message) -> bytes:
    # Deterministic so equal records give equal bytes (value compares in transactions).
    data: bytes = record.SerializeToString(deterministic=True)
    return data


def decode(record_type: type[M], data: bytes) -> M:
    record: M = record_type()
    try:
        record.ParseFromString(data)
    except DecodeError as err:
        raise errors.Internal(f"corrupt {record_type.__name__} in etcd: {err}") from err
    return record
