"""ResolvedNames: TTL clamping and expiry, per-name answers, the allowed-name view, eviction."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address

from aenv_nodeagent.egress.resolved import MAX_TTL_S, MIN_TTL_S, ResolvedNames, clamp_ttl

A = IPv4Address("203.0.113.10")
B = IPv4Address("203.0.113.11")
V6 = IPv6Address("2001:db8::1")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_ttl_is_clamped_to_five_seconds_and_one_hour() -> None:
    assert clamp_ttl(0) == MIN_TTL_S == 5.0
    assert clamp_ttl(30) == 30.0
    assert clamp_ttl(86400) == MAX_TTL_S == 3600.0


def test_an_answer_lives_for_its_clamped_ttl_only() -> None:
    clock = Clock()
    names = ResolvedNames(clock=clock)
    assert names.record("api.example.com", [A], 0) == 5.0
    clock.now += 4.9
    assert names.is_resolved_for("api.example.com", A)
    clock.now += 0.2
    assert not names.is_resolved_for("api.example.com", A)
    assert len(names) == 0  # an expired pair is dropped when seen

    assert names.record("long.example.com", [B], 10**6) == 3600.0
    clock.now += 3599
    assert names.is_resolved_for("long.example.com", B)
    clock.now += 2
    assert not names.is_resolved_for("long.example.com", B)


def test_answers_belong_to_their_name_only() -> None:
    names = ResolvedNames(clock=Clock())
    names.record("API.Example.com.", [A, V6], 60)
    assert names.is_resolved_for("api.example.com", A)
    assert names.is_resolved_for("api.EXAMPLE.com.", V6)
    assert not names.is_resolved_for("api.example.com", B)
    assert not names.is_resolved_for("other.example.com", A)


def test_re_recording_extends_an_answer() -> None:
    clock = Clock()
    names = ResolvedNames(clock=clock)
    names.record("a.example.com", [A], 10)
    clock.now += 8
    names.record("a.example.com", [A], 10)
    clock.now += 8
    assert names.is_resolved_for("a.example.com", A)


def test_any_allowed_counts_only_names_the_policy_allows_now() -> None:
    clock = Clock()
    names = ResolvedNames(clock=clock, allowed=lambda name: name == "ok.example.com")
    names.record("other.example.com", [A], 60)
    assert not names.is_resolved_any_allowed(A)
    names.record("ok.example.com", [A], 60)
    assert names.is_resolved_any_allowed(A)
    assert not names.is_resolved_any_allowed(B)

    names.set_allowed(lambda name: False)  # a policy update dropped the name
    assert not names.is_resolved_any_allowed(A)
    names.set_allowed(lambda name: True)
    clock.now += 61
    assert not names.is_resolved_any_allowed(A)


def test_memory_is_bounded_and_the_oldest_go_first() -> None:
    names = ResolvedNames(clock=Clock(), max_entries=3)
    for i in range(5):
        names.record(f"n{i}.example.com", [ip_address(f"203.0.113.{i}")], 60)
    assert len(names) == 3
    assert not names.is_resolved_for("n0.example.com", ip_address("203.0.113.0"))
    assert not names.is_resolved_any_allowed(ip_address("203.0.113.1"))
    assert names.is_resolved_for("n4.example.com", ip_address("203.0.113.4"))


def test_clear_forgets_everything() -> None:
    names = ResolvedNames(clock=Clock())
    names.record("a.example.com", [A, B], 60)
    names.clear()
    assert len(names) == 0
    assert not names.is_resolved_for("a.example.com", A)
    assert not names.is_resolved_any_allowed(B)
