"""Typed fields of JSON request bodies: every mismatch is an InvalidArgument (HTTP 400) naming
the field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from aenv_common.errors import InvalidArgument

T = TypeVar("T")


def json_field(
    body: Mapping[str, Any], name: str, kind: type[T], required: bool = False
) -> T | None:
    value = body.get(name)
    if value is None:
        if required:
            raise InvalidArgument(f"{name} is required")
        return None
    # bool is an int in Python, but not on the wire.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidArgument(f"{name} must be of type {_type_name(kind)}")
    return value


def _type_name(kind: type[Any]) -> str:
    return {str: "string", int: "integer", bool: "boolean", dict: "object", list: "array"}.get(
        kind, kind.__name__
    )


def json_strings(body: Mapping[str, Any], name: str) -> list[str]:
    value = json_field(body, name, list) or []
    if not all(isinstance(v, str) for v in value):
        raise InvalidArgument(f"{name} must be an array of strings")
    return list(value)
