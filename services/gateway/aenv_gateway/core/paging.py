"""Cursor pagination over in-memory record lists, ordered by (time in ns, id).

The cursor is the key of the last item handed out, so pages stay consistent while records come
and go between requests."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from typing import TypeVar

from aenv_common.errors import InvalidArgument

T = TypeVar("T")
OrderKey = tuple[int, str]


def paginate(
    items: Sequence[T],
    key: Callable[[T], OrderKey],
    *,
    newest_first: bool,
    limit: int | None,
    cursor: str | None,
) -> tuple[list[T], str | None]:
    """One page and the cursor of the next one (None on the last page)."""
    ordered = sorted(items, key=key, reverse=newest_first)
    if cursor is not None:
        after = _decode_cursor(cursor)
        ordered = [i for i in ordered if (key(i) < after if newest_first else key(i) > after)]
    if limit is None or len(ordered) <= limit:
        return ordered, None
    page = ordered[:limit]
    return page, _encode_cursor(key(page[-1]))


def _encode_cursor(key: OrderKey) -> str:
    return base64.urlsafe_b64encode(f"{key[0]}:{key[1]}".encode()).decode().rstrip("=")


def _decode_cursor(token: str) -> OrderKey:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        nanos, _, record_id = raw.partition(":")
        return (int(nanos), record_id)
    except (binascii.Error, UnicodeDecodeError, ValueError) as err:
        raise InvalidArgument("invalid nextToken") from err
