"""What a secret may be called and carry (E2B's Secret API, SDK 2.63).

A name is what `Secret.fill(name)` interpolates into `${e2b.secrets.<name>}`, so it holds no
`{`, `}` or control character (the SDK's own `_validate_secret_name` rule); it is lower-cased
before storage and every lookup (E2B returns names in that canonical form), may not start with
`sec_` (the prefix of secret ids, so a path segment is an id or a name, never both) and is at
most MAX_NAME_CHARS long. aenv also refuses `/`, `?`, `#` and `%`: the SDK puts the name into
the URL path as it is (`/secrets/<name>`), where these would end the segment or be decoded.
Metadata has E2B's documented bounds; a value at most MAX_VALUE_BYTES.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from aenv_common.errors import InvalidArgument

ID_PREFIX = "sec_"
MAX_NAME_CHARS = 128
MAX_VALUE_BYTES = 64 * 1024
MAX_METADATA_ENTRIES = 32
MAX_METADATA_KEY_BYTES = 128
MAX_METADATA_VALUE_BYTES = 1024
MAX_METADATA_BYTES = 8192

_FORBIDDEN = re.compile(r"[{}\x00-\x1f\x7f-\x9f]")
_UNADDRESSABLE = re.compile(r"[/?#%]")


def canonical_name(name: str) -> str:
    """The stored form of a secret name.

    :raise InvalidArgument: empty, too long, reserved, or holding `{`, `}` or a control
        character."""
    if not name:
        raise InvalidArgument("secret name must not be empty")
    if len(name) > MAX_NAME_CHARS:
        raise InvalidArgument(f"secret name must be at most {MAX_NAME_CHARS} characters")
    if _FORBIDDEN.search(name):
        raise InvalidArgument(
            f"secret name {name!r} cannot contain '{{', '}}' or control characters: it is "
            "interpolated into the '${e2b.secrets.<name>}' placeholder")
    if _UNADDRESSABLE.search(name):
        raise InvalidArgument(
            f"secret name {name!r} cannot contain '/', '?', '#' or '%': it is sent in the "
            "URL path of /secrets/{secretID}")
    canonical = name.lower()
    if canonical.startswith(ID_PREFIX):
        raise InvalidArgument(
            f"secret name {name!r} starts with '{ID_PREFIX}', which is reserved for secret ids")
    return canonical


def is_secret_id(reference: str) -> bool:
    """Whether a path's `{secretIdOrName}` names a secret by id (else by name)."""
    return reference.lower().startswith(ID_PREFIX)


def check_value(value: str) -> bytes:
    """The value's bytes. :raise InvalidArgument: longer than MAX_VALUE_BYTES (never quoted)."""
    data = value.encode()
    if len(data) > MAX_VALUE_BYTES:
        raise InvalidArgument(f"secret value must be at most {MAX_VALUE_BYTES} bytes")
    return data


def check_metadata(metadata: Mapping[Any, Any]) -> dict[str, str]:
    """:raise InvalidArgument: not strings to strings, or past E2B's bounds (32 entries, keys
    128 bytes, values 1024 bytes, 8192 bytes in all)."""
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise InvalidArgument("metadata must map strings to strings")
    if len(metadata) > MAX_METADATA_ENTRIES:
        raise InvalidArgument(f"metadata has at most {MAX_METADATA_ENTRIES} entries")
    total = 0
    for key, value in metadata.items():
        key_bytes, value_bytes = len(key.encode()), len(value.encode())
        if not key:
            raise InvalidArgument("metadata keys must not be empty")
        if key_bytes > MAX_METADATA_KEY_BYTES:
            raise InvalidArgument(
                f"metadata key {key[:32]!r}… is longer than {MAX_METADATA_KEY_BYTES} bytes")
        if value_bytes > MAX_METADATA_VALUE_BYTES:
            raise InvalidArgument(
                f"metadata value of {key!r} is longer than {MAX_METADATA_VALUE_BYTES} bytes")
        total += key_bytes + value_bytes
    if total > MAX_METADATA_BYTES:
        raise InvalidArgument(f"metadata must be at most {MAX_METADATA_BYTES} bytes in all")
    return dict(metadata)
