"""A host's header rules applied to one outgoing request, secrets filled at send time.

Every rule whose host matches applies, in the order `rules_for` gives (exact hosts first, then
wildcards and ranges, each in the policy's order), and each rule's transforms in their order.
Within one transform: `remove_headers` first, then `set_headers` (E2B's `transform.headers`:
replaces every header of that name), then `add_headers` (appends, keeping the request's own) —
so removing and adding one name in a transform reads as "replace with these values". Names
compare case-insensitively; a set or added header goes out with the rule's spelling.

Values may hold `${e2b.secrets.<name>}` placeholders (`Secret.fill`), filled from the sandbox
owner's secrets for this very request: a destroyed secret stops being sent at once
(`SecretUnavailable`, answered 403 by the relay, no upstream contact). Values are never logged
and never put in an error; errors name the secret only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from aenv_common import errors
from aenv_common.egress.rules import SECRET_PLACEHOLDER, HeaderTransform, NetworkRule

# Bytes that would end a header line or that h11 refuses inside a value.
_UNSENDABLE = re.compile(r"[\x00\r\n\f\v]")

# A secret's current value by name, for the sandbox's owner key (None: no such secret now).
# The egress process binds SecretValues.value to the sandbox's owner_key_id.
SecretLookup = Callable[[str], str | None]
Header = tuple[bytes, bytes]


class SecretUnavailable(errors.PermissionDenied):
    """A rule's placeholder names a secret the owner no longer has (or one that cannot be sent
    in a header). Carries the secret's name only."""

    def __init__(self, secret_name: str, why: str = "is not available") -> None:
        super().__init__(f"secret {secret_name!r} {why}")
        self.secret_name = secret_name


def apply_rules(
    headers: Iterable[Header], rules: Sequence[NetworkRule], secrets: SecretLookup
) -> list[Header]:
    """The request's headers after every rule, placeholders filled. Raises SecretUnavailable
    before anything is changed or sent."""
    result = list(headers)
    for rule in rules:
        for edits in rule.transforms:
            result = _apply(result, edits, secrets)
    return result


def _apply(headers: list[Header], edits: HeaderTransform, secrets: SecretLookup) -> list[Header]:
    dropped = {name.lower() for name in edits.remove_headers}
    dropped |= {name.lower() for name in edits.set_headers}
    kept = [h for h in headers if h[0].decode("latin-1").lower() not in dropped]
    for name, template in [*edits.set_headers.items(), *edits.add_headers.items()]:
        kept.append((name.encode("latin-1"), fill(template, secrets).encode()))
    return kept


def fill(template: str, secrets: SecretLookup) -> str:
    """`template` with each placeholder replaced by its secret's value (surrounding whitespace
    dropped, as HTTP drops it around a header value)."""

    def value_of(match: re.Match[str]) -> str:
        secret_name = match.group(1)
        value = secrets(secret_name)
        if value is None:
            raise SecretUnavailable(secret_name)
        value = value.strip()
        if _UNSENDABLE.search(value):
            raise SecretUnavailable(secret_name, "holds characters a header cannot carry")
        return value

    filled = SECRET_PLACEHOLDER.sub(value_of, template).strip()
    if _UNSENDABLE.search(filled):
        raise errors.InvalidArgument("a header rule's value holds characters a header cannot carry")
    return filled

