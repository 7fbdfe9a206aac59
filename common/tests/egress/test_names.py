"""Domain names and patterns: what a policy accepts, and what a guest's name matches."""

from __future__ import annotations

import pytest

from aenv_common.egress.names import DomainPattern, canonical_name
from aenv_common.errors import InvalidArgument


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("API.Example.COM", "api.example.com"),
        ("example.com.", "example.com"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
        ("a-b.c0", "a-b.c0"),
        ("-a.com", None),
        ("a-.com", None),
        ("a..com", None),
        ("1.2.3.4", None),
        ("bücher.example", None),
        ("a_b.com", None),
        ("x" * 64 + ".com", None),
        (".".join(["a" * 63] * 4) + ".com", None),
        ("", None),
    ],
)
def test_canonical_names(text: str, canonical: str | None) -> None:
    assert canonical_name(text) == canonical


@pytest.mark.parametrize(
    ("pattern", "host", "matches"),
    [
        ("api.example.com", "API.example.com.", True),
        ("api.example.com", "example.com", False),
        ("api.example.com", "x.api.example.com", False),
        ("*.example.com", "a.example.com", True),
        ("*.example.com", "a.b.example.com", True),
        ("*.example.com", "example.com", False),
        ("*.example.com", "badexample.com", False),
        ("*", "anything.at.all", True),
        ("*", "not a name", False),
    ],
)
def test_pattern_matching(pattern: str, host: str, matches: bool) -> None:
    assert DomainPattern.parse(pattern).matches(host) is matches


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a.*.com", "'a.*.com' is not a valid domain name: '*' is allowed only as the whole "
                    "first label ('*.example.com')"),
        ("*example.com", "'*example.com' is not a valid domain name: '*' is allowed only as "
                         "the whole first label ('*.example.com')"),
        ("*.", "'*.' is not a valid domain name: an empty name"),
        ("exa mple.com", "'exa mple.com' is not a valid domain name: label 'exa mple' is not "
                         "letters, digits and inner hyphens"),
        ("bücher.de", "'bücher.de' is not a valid domain name: names must be ASCII (punycode "
                      "for international names)"),
        ("a..b", "'a..b' is not a valid domain name: an empty label"),
    ],
)
def test_bad_patterns_are_refused_naming_the_entry(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        DomainPattern.parse(text)
    assert str(raised.value) == message


def test_covers_is_name_set_inclusion() -> None:
    wild = DomainPattern.parse("*.example.com")
    assert wild.covers(DomainPattern.parse("api.example.com"))
    assert wild.covers(DomainPattern.parse("*.eu.example.com"))
    assert wild.covers(wild)
    assert not wild.covers(DomainPattern.parse("example.com"))
    assert not DomainPattern.parse("api.example.com").covers(wild)
    assert DomainPattern.parse("*").covers(wild)
    assert str(wild) == "*.example.com" and str(DomainPattern.parse("*")) == "*"
