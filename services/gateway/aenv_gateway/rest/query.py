"""Query parameters read alike by the REST routes."""

from __future__ import annotations

from collections.abc import Mapping

from aenv_common.errors import InvalidArgument


def optional_int(params: Mapping[str, str], name: str) -> int | None:
    """The integer `name` holds; None when absent or empty (E2B's clients send `limit=` for none).

    :raise InvalidArgument: anything else that is not an integer.
    """
    value = params.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise InvalidArgument(f"{name} must be an integer") from None
