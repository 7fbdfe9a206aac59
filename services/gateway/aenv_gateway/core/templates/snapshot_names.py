"""Snapshot names as E2B takes and gives them: `[namespace/]name[:tag]`, a snapshot template's
alias and the tag of one of its builds. E2B's namespace is the team's slug; aenv has no teams, so
every name lives in one namespace, NAMESPACE.

Pure: parsing and presentation only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aenv_common.errors import InvalidArgument
from aenv_gateway.core.templates.names import DEFAULT_TAG

NAMESPACE = "aenv"
# Ids the node agent gives snapshots (its snapshots/store.py).
SNAPSHOT_ID_PREFIX = "snap-"
# E2B's rules, applied after trimming and lower-casing.
_IDENTIFIER = re.compile(r"^[a-z0-9_-]+$")
_TAG = re.compile(r"^[a-z0-9_.-]+$")


@dataclass(frozen=True)
class SnapshotName:
    alias: str
    tag: str = DEFAULT_TAG
    # A tag the text named, "default" included (a list filter then matches only that tag).
    tagged: bool = False

    @property
    def full(self) -> str:
        """`namespace/alias`: what E2B lists as the snapshot's name."""
        return full_name(self.alias)


def full_name(alias: str) -> str:
    return f"{NAMESPACE}/{alias}"


def with_tag(name: str, tag: str) -> str:
    return f"{name}:{tag}"


def parse_snapshot_name(text: str) -> SnapshotName:
    """A name a snapshot is asked to be created or listed by.

    :raise InvalidArgument: E2B's 400: a part breaks its rules, or a namespace other than ours.
    """
    identifier, has_tag, tag = text.strip().partition(":")
    namespace, has_namespace, alias = identifier.partition("/")
    if not has_namespace:
        namespace, alias = "", identifier
    if has_tag:
        tag = _clean(tag, "tag", _TAG)
    if has_namespace:
        namespace = _clean(namespace, "namespace", _IDENTIFIER)
    alias = _clean(alias, "template ID", _IDENTIFIER)
    if has_namespace and namespace != NAMESPACE:
        raise InvalidArgument(f"namespace '{namespace}' must match your team '{NAMESPACE}'")
    return SnapshotName(alias, tag or DEFAULT_TAG, bool(has_tag))


def lookup_name(text: str) -> SnapshotName | None:
    """The snapshot `text` may name when sandboxes are created from it or it is deleted; None
    when it cannot name one (it then names something else, or nothing)."""
    try:
        return parse_snapshot_name(text)
    except InvalidArgument:
        return None


def _clean(value: str, part: str, rule: re.Pattern[str]) -> str:
    cleaned = value.strip().lower()
    if not rule.match(cleaned):
        raise InvalidArgument(f"Invalid name: invalid {part}: {value}")
    return cleaned
