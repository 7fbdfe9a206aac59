"""Template names as E2B's template API takes them: `name` or `name:tag`, where the name is an
alias of the template (or its id) and the tag picks one of its builds ("default" when absent).

Pure: parsing and validation only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aenv_common.errors import InvalidArgument

DEFAULT_TAG = "default"
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$")
_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class TemplateName:
    name: str
    tag: str = DEFAULT_TAG

    def __str__(self) -> str:
        return f"{self.name}:{self.tag}"


def split_name(text: str) -> TemplateName:
    """`name[:tag]`, unchecked: for looking a name up (anything unknown is simply not found)."""
    name, _, tag = text.partition(":")
    return TemplateName(name, tag or DEFAULT_TAG)


def parse_name(text: str) -> TemplateName:
    """A name a build is asked for.

    :raise InvalidArgument: empty, or not lower-case letters, digits, '.', '-', '_' (tags may
        also hold upper-case letters).
    """
    if not text:
        raise InvalidArgument("name is required")
    parsed = split_name(text)
    check_name(parsed.name)
    check_tag(parsed.tag)
    return parsed


def check_name(name: str) -> None:
    if not _NAME.match(name):
        raise InvalidArgument(
            f"invalid template name {name!r}: use 1-128 lower-case letters, digits, '.', '-' "
            "or '_', starting with a letter or digit")


def check_tag(tag: str) -> None:
    if not _TAG.match(tag):
        raise InvalidArgument(
            f"invalid tag {tag!r}: use 1-128 letters, digits, '.', '-' or '_', starting with a "
            "letter or digit")
