"""Domain names and name patterns of an egress policy.

A policy names hosts exactly (``api.example.com``) or by wildcard (``*.example.com``: every name
below ``example.com`` at any depth, never ``example.com`` itself); ``*`` alone matches every
name, as in E2B's egress firewall. Names are compared in their canonical form: ASCII
letters-digits-hyphens labels (an IDN travels as punycode), lower case, no trailing dot, at most
253 characters with labels of at most 63.

Parsing is strict (a policy entry that is not a valid name is refused, naming it); matching is
lenient (a guest's SNI or Host that is not a valid name simply matches nothing).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from aenv_common.errors import InvalidArgument

MAX_NAME_LENGTH = 253
_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def canonical_name(text: str) -> str | None:
    """The canonical form of a host name, or None when ``text`` is not one. An all-numeric
    last label is refused: such a "name" is an address literal some resolvers would accept."""
    name = text.strip().lower().removesuffix(".")
    if not name or len(name) > MAX_NAME_LENGTH:
        return None
    labels = name.split(".")
    if not all(_LABEL.match(label) for label in labels) or labels[-1].isdigit():
        return None
    return name


def name_problem(text: str) -> str:
    """Why ``text`` is not a valid domain name (for a 400 naming the entry)."""
    name = text.lower().removesuffix(".")
    if not name:
        return "an empty name"
    if not name.isascii():
        return "names must be ASCII (punycode for international names)"
    if len(name) > MAX_NAME_LENGTH:
        return f"longer than {MAX_NAME_LENGTH} characters"
    if "*" in name:
        return "'*' is allowed only as the whole first label ('*.example.com')"
    for label in name.split("."):
        if not label:
            return "an empty label"
        if len(label) > 63:
            return "a label longer than 63 characters"
        if not _LABEL.match(label):
            return f"label {label!r} is not letters, digits and inner hyphens"
    return "its last label is all digits"


@dataclass(frozen=True)
class DomainPattern:
    """An exact name, or a wildcard for every name below ``suffix`` (``suffix`` empty: any
    name)."""

    suffix: str
    wildcard: bool

    @classmethod
    def parse(cls, text: str) -> DomainPattern:
        """Raises InvalidArgument saying what is wrong with ``text``."""
        if text == "*":
            return cls("", wildcard=True)
        wildcard = text.startswith("*.")
        body = text[2:] if wildcard else text
        name = canonical_name(body) if body == body.strip() else None
        if name is None:
            raise InvalidArgument(f"{text!r} is not a valid domain name: {name_problem(body)}")
        return cls(name, wildcard=wildcard)

    def matches(self, host: str) -> bool:
        """Whether a guest's name (SNI, Host, DNS question) falls under this pattern."""
        name = canonical_name(host)
        if name is None:
            return False
        if not self.wildcard:
            return name == self.suffix
        return not self.suffix or name.endswith("." + self.suffix)

    def covers(self, other: DomainPattern) -> bool:
        """Whether every name ``other`` matches is matched by this pattern too."""
        if not self.wildcard:
            return not other.wildcard and other.suffix == self.suffix
        if not self.suffix:
            return True
        if other.wildcard and other.suffix == self.suffix:
            return True
        return other.suffix.endswith("." + self.suffix)

    def __str__(self) -> str:
        if not self.wildcard:
            return self.suffix
        return f"*.{self.suffix}" if self.suffix else "*"


class NameSet:
    """Patterns indexed so that matching a name costs the same for 1 or 1024 of them: exact
    names in one set, wildcard suffixes in another, looked up by each suffix of the name."""

    def __init__(self, patterns: Iterable[DomainPattern]) -> None:
        listed = list(patterns)
        self._exact = frozenset(p.suffix for p in listed if not p.wildcard)
        self._below = frozenset(p.suffix for p in listed if p.wildcard)

    def matches(self, host: str) -> bool:
        name = canonical_name(host)
        if name is None:
            return False
        if name in self._exact or "" in self._below:
            return True
        labels = name.split(".")
        return any(".".join(labels[i:]) in self._below for i in range(1, len(labels)))
