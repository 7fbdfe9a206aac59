"""Header rules on one request: set/add/remove in order, names case-insensitive, secrets filled
at send time and a gone secret refused by name only."""

from __future__ import annotations

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common import errors
from aenv_common.egress.rules import NetworkRule, parse_rules
from aenv_nodeagent.egress.transforms import SecretUnavailable, apply_rules, fill

SECRET = "sk-live-0123456789"


def _rules(*transforms: cluster_pb2.HeaderTransform) -> tuple[NetworkRule, ...]:
    return parse_rules([cluster_pb2.NetworkRule(host="api.example.com", transforms=transforms)])


def _secrets(**values: str) -> dict[str, str]:
    return values


def _none(name: str) -> str | None:
    return None


REQUEST = [(b"Host", b"api.example.com"), (b"authorization", b"Bearer guest"),
           (b"X-Trace", b"1"), (b"x-trace", b"2"), (b"Accept", b"*/*")]


def test_set_replaces_every_header_of_the_name_whatever_its_case() -> None:
    rules = _rules(cluster_pb2.HeaderTransform(
        set_headers={"Authorization": "Bearer ${e2b.secrets.openai}"}))
    out = apply_rules(REQUEST, rules, _secrets(openai=SECRET).get)
    assert (b"Authorization", f"Bearer {SECRET}".encode()) in out
    assert [h for h in out if h[0].lower() == b"authorization"] == [
        (b"Authorization", f"Bearer {SECRET}".encode())]
    assert out[:1] == [(b"Host", b"api.example.com")]


def test_add_keeps_the_requests_own_and_remove_drops_all_spellings() -> None:
    rules = _rules(cluster_pb2.HeaderTransform(
        add_headers={"x-trace": "3"}, remove_headers=["ACCEPT"]))
    out = apply_rules(REQUEST, rules, _none)
    assert [v for n, v in out if n.lower() == b"x-trace"] == [b"1", b"2", b"3"]
    assert not [h for h in out if h[0].lower() == b"accept"]


def test_transforms_apply_in_order_and_remove_then_add_reads_as_replace() -> None:
    rules = _rules(
        cluster_pb2.HeaderTransform(set_headers={"X-Stage": "one"}),
        cluster_pb2.HeaderTransform(add_headers={"X-Stage": "two"}),
        cluster_pb2.HeaderTransform(remove_headers=["x-trace"], add_headers={"X-Trace": "only"}),
    )
    out = apply_rules(REQUEST, rules, _none)
    assert [v for n, v in out if n.lower() == b"x-stage"] == [b"one", b"two"]
    assert [v for n, v in out if n.lower() == b"x-trace"] == [b"only"]
    later = _rules(cluster_pb2.HeaderTransform(add_headers={"X-Stage": "two"}),
                   cluster_pb2.HeaderTransform(set_headers={"X-Stage": "one"}))
    assert [v for n, v in apply_rules(REQUEST, later, _none) if n == b"X-Stage"] == [b"one"]


def test_several_placeholders_fill_and_whitespace_around_a_value_goes() -> None:
    filled = fill("${e2b.secrets.a}:${e2b.secrets.b}", _secrets(a=" user\n", b="pw").get)
    assert filled == "user:pw"


def test_a_gone_secret_is_refused_by_name_before_any_header_changes() -> None:
    rules = _rules(cluster_pb2.HeaderTransform(
        set_headers={"Authorization": "Bearer ${e2b.secrets.openai}"}))
    values = _secrets(openai=SECRET)
    apply_rules(REQUEST, rules, values.get)
    del values["openai"]
    with pytest.raises(SecretUnavailable) as refused:
        apply_rules(REQUEST, rules, values.get)
    assert refused.value.secret_name == "openai"
    assert isinstance(refused.value, errors.PermissionDenied)


def test_a_secret_that_would_split_the_header_is_refused_without_its_value() -> None:
    with pytest.raises(SecretUnavailable) as refused:
        fill("${e2b.secrets.bad}", _secrets(bad=f"{SECRET}\r\nX-Evil: 1").get)
    assert SECRET not in str(refused.value) and "'bad'" in str(refused.value)
