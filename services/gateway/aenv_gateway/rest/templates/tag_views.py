"""The tag views of E2B's template API (`/templates/{id}/tags/count`, `/exists`, `/groups`,
`/{tag}/assignments`): the catalog's tags as assignment events. Pure.

The catalog keeps each tag's current build, not the history of its assignments: a tag is one
assignment, made when its build finished (E2B lists every past assignment too).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from aenv_common.errors import InvalidArgument
from aenv_gateway.core.templates.names import check_tag
from aenv_gateway.rest.schemas import rfc3339

# E2B's defaults and bounds (its dashboard API's, which the SDK's client is generated from).
ASSIGNMENTS_PER_GROUP = (6, 25)
GROUPS_PER_PAGE = (25, 100)
ASSIGNMENTS_PER_PAGE = (50, 100)
MAX_SEARCH = 64
SORTS = ("latest_desc", "latest_asc", "name_asc", "name_desc")
_SEARCH = re.compile(r"^[a-z0-9._-]*$")
# Assignment ids are derived, so the same assignment keeps its id across calls.
_ASSIGNMENTS = uuid.UUID("6f1d3a52-5c1e-4e0b-9a57-3f0d1b2c4e61")


@dataclass(frozen=True)
class Assignment:
    template_id: str
    tag: str
    build_id: str
    assigned_at: Timestamp
    build_created_at: Timestamp
    build_finished_at: Timestamp | None

    @property
    def assignment_id(self) -> str:
        return str(uuid.uuid5(_ASSIGNMENTS, f"{self.template_id}/{self.tag}/{self.build_id}"))

    def present(self) -> dict[str, Any]:
        """TemplateTagAssignment."""
        finished = self.build_finished_at
        return {"assignmentId": self.assignment_id, "buildId": self.build_id,
                "assignedAt": rfc3339(self.assigned_at),
                "buildCreatedAt": rfc3339(self.build_created_at),
                "buildFinishedAt": rfc3339(finished) if finished is not None else None}


def count(assignments: Sequence[Assignment]) -> dict[str, Any]:
    return {"total": len({a.tag for a in assignments})}


def exists(assignments: Sequence[Assignment], query: Mapping[str, str]) -> dict[str, Any]:
    tag = _tag(query.get("tag"))
    return {"exists": any(a.tag == tag for a in assignments), "normalizedTag": tag}


def assignments_of(
    assignments: Sequence[Assignment], tag: str, query: Mapping[str, str]
) -> dict[str, Any]:
    """TemplateTagAssignmentsResponse: the tag's assignments, latest first, after `cursor`
    (`<RFC 3339 time>|<assignment id>`, as E2B's); an unknown tag has none."""
    tag = _tag(tag)
    limit = _limit(query, "limit", ASSIGNMENTS_PER_PAGE)
    after = _assignment_cursor(query.get("cursor"))
    mine = sorted((a for a in assignments if a.tag == tag),
                  key=lambda a: (a.assigned_at.ToMicroseconds(), a.assignment_id), reverse=True)
    if after is not None:
        mine = [a for a in mine if (a.assigned_at.ToMicroseconds(), a.assignment_id) < after]
    page = mine[:limit]
    more = len(mine) > limit
    return {"data": [a.present() for a in page],
            "nextCursor": _assignment_cursor_of(page[-1]) if more else None}


def groups(assignments: Sequence[Assignment], query: Mapping[str, str]) -> dict[str, Any]:
    """TemplateTagGroupsResponse: one group per tag (filtered by `search`, ordered by `sort`),
    `tagsLimit` of them after `tagsCursor`, each with at most `assignmentLimit` assignments."""
    per_group = _limit(query, "assignmentLimit", ASSIGNMENTS_PER_GROUP)
    per_page = _limit(query, "tagsLimit", GROUPS_PER_PAGE)
    sort = query.get("sort") or SORTS[0]
    if sort not in SORTS:
        raise InvalidArgument("Invalid sort parameter")
    search = _search(query.get("search"))
    by_tag: dict[str, list[Assignment]] = {}
    for a in sorted(assignments, key=lambda a: a.assigned_at.ToMicroseconds(), reverse=True):
        if search in a.tag.lower():
            by_tag.setdefault(a.tag, []).append(a)
    key = _group_key(sort)
    ordered = sorted(by_tag.items(), key=lambda item: key(item[0], _latest(item[1])),
                     reverse=sort == "name_desc")
    cursor = query.get("tagsCursor")
    if cursor:
        after = _group_cursor(cursor, sort)
        ordered = [(tag, found) for tag, found in ordered
                   if _is_after(key(tag, _latest(found)), key(*after), sort)]
    page = ordered[:per_page]
    shown = [{"tag": tag, "assignments": [a.present() for a in found[:per_group]],
              "hasMore": len(found) > per_group} for tag, found in page]
    next_cursor = None
    if len(ordered) > per_page:
        tag, found = page[-1]
        next_cursor = f"{sort}|{rfc3339(_stamp(_latest(found)))}|{tag}"
    return {"tags": shown, "nextCursor": next_cursor}


GroupKey = Callable[[str, int], tuple[Any, ...]]


def _group_key(sort: str) -> GroupKey:
    if sort == "latest_desc":
        return lambda tag, latest: (-latest, tag)
    if sort == "latest_asc":
        return lambda tag, latest: (latest, tag)
    return lambda tag, latest: (tag,)


def _is_after(key: tuple[Any, ...], cursor: tuple[Any, ...], sort: str) -> bool:
    return key < cursor if sort == "name_desc" else key > cursor


def _latest(found: Sequence[Assignment]) -> int:
    return max(int(a.assigned_at.ToMicroseconds()) for a in found)


def _stamp(micros: int) -> Timestamp:
    stamp = Timestamp()
    stamp.FromMicroseconds(micros)
    return stamp


def _group_cursor(cursor: str, sort: str) -> tuple[str, int]:
    """`<sort>|<RFC 3339 time>|<tag>` -> (tag, microseconds: what our RFC 3339 keeps)."""
    parts = cursor.split("|", 2)
    if len(parts) != 3:
        raise InvalidArgument("Invalid cursor")
    if parts[0] != sort:
        raise InvalidArgument(
            "Cursor was issued for a different sort; clear the cursor and restart")
    if parts[2] and not _SEARCH.match(parts[2]):
        raise InvalidArgument("Invalid cursor")
    return parts[2], _micros(parts[1], "Invalid cursor")


def _assignment_cursor(cursor: str | None) -> tuple[int, str] | None:
    if not cursor:
        return None
    moment, sep, assignment = cursor.partition("|")
    try:
        uuid.UUID(assignment)
    except ValueError:
        raise InvalidArgument("invalid cursor") from None
    if not sep:
        raise InvalidArgument("invalid cursor")
    return _micros(moment, "invalid cursor"), assignment


def _assignment_cursor_of(a: Assignment) -> str:
    return f"{rfc3339(a.assigned_at)}|{a.assignment_id}"


def _micros(text: str, message: str) -> int:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(message) from None
    if moment.tzinfo is None:
        raise InvalidArgument(message)
    stamp = Timestamp()
    stamp.FromDatetime(moment)
    return int(stamp.ToMicroseconds())


def _tag(tag: str | None) -> str:
    if not tag:
        raise InvalidArgument("Invalid tag")
    try:
        check_tag(tag)
    except InvalidArgument:
        raise InvalidArgument("Invalid tag") from None
    return tag


def _search(text: str | None) -> str:
    cleaned = (text or "").strip().lower()
    if len(cleaned) > MAX_SEARCH or not _SEARCH.match(cleaned):
        raise InvalidArgument("Invalid search parameter")
    return cleaned


def _limit(query: Mapping[str, str], name: str, bounds: tuple[int, int]) -> int:
    """A limit as E2B takes it: absent, the default; clamped to 1..max."""
    default, most = bounds
    text = query.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgument(f"{name} must be an integer") from None
    return max(1, min(value, most))
