"""SlotResolver.answer against a scripted loopback upstream: forwarding, recording, reporting,
the refusals, and what a forged upstream answer gets (nothing)."""

from __future__ import annotations

import logging
from ipaddress import IPv4Address, ip_address

import dns.message
import dns.rcode
import dns.rrset
import pytest

from aenv_common.egress import EgressRules
from aenv_nodeagent.egress import dns_upstream
from aenv_nodeagent.egress.dns import (
    QUERIES_PER_SECOND,
    QUERY_BURST,
    SlotResolver,
    TokenBucket,
    resolve,
    servers_for,
)
from aenv_nodeagent.egress.resolved import IPAddress, ResolvedNames

from .dnsfakes import Script, query, rules, scripted_upstream

Reports = list[tuple[str, list[IPAddress], float]]


def answering(*records: tuple[str, str, str], ttl: int = 120) -> Script:
    """An honest upstream answering with ``records`` (name, type, value)."""
    def script(asked: dns.message.Message) -> list[bytes]:
        reply = dns.message.make_response(asked)
        reply.answer = [dns.rrset.from_text(name, ttl, "IN", rdtype, value)
                        for name, rdtype, value in records]
        return [reply.to_wire()]
    return script


async def _resolver(policy: EgressRules, script: Script) -> tuple[SlotResolver, Reports]:
    _, server = await scripted_upstream(script)
    reports: Reports = []

    async def report(netns: str, addresses: list[IPAddress], ttl: float) -> None:
        reports.append((netns, addresses, ttl))

    return SlotResolver("ns-test", policy, ResolvedNames(), [server], report), reports


async def _ask(resolver: SlotResolver, name: str, rdtype: str = "A") -> dns.message.Message:
    wire = await resolver.answer(query(name, rdtype).to_wire(), tcp=False)
    assert wire is not None
    return dns.message.from_wire(wire)


ALLOWED = rules(allow=["api.example.com"], deny=["0.0.0.0/0"])
PUBLIC, PRIVATE = IPv4Address("203.0.113.5"), IPv4Address("10.9.8.7")


async def test_an_allowed_name_is_forwarded_recorded_and_reported() -> None:
    script = answering(("api.example.com.", "A", "203.0.113.5"),
                       ("api.example.com.", "A", "10.9.8.7"))
    resolver, reports = await _resolver(ALLOWED, script)
    reply = await _ask(resolver, "API.example.com")
    assert reply.rcode() == dns.rcode.NOERROR
    assert {rd.address for rd in reply.answer[0]} == {str(PUBLIC), str(PRIVATE)}
    assert resolver._resolved.is_resolved_for("api.example.com", PUBLIC)
    assert resolver._resolved.is_resolved_any_allowed(PUBLIC)
    # only the public address reaches the agent's nft set
    assert reports == [("ns-test", [PUBLIC], 120.0)]


async def test_denied_names_get_nxdomain_and_unlisted_refused_without_asking_upstream() -> None:
    upstream, server = await scripted_upstream(answering(("x.", "A", "203.0.113.1")))
    policy = rules(allow=["api.example.com"], deny=["*.evil.example", "0.0.0.0/0"])
    resolver = SlotResolver("ns", policy, ResolvedNames(), [server], _no_report)
    assert (await _ask(resolver, "a.evil.example")).rcode() == dns.rcode.NXDOMAIN
    assert (await _ask(resolver, "tunnel.attacker.example", "TXT")).rcode() == dns.rcode.REFUSED
    assert upstream.queries == []


async def test_an_unlisted_name_is_forwarded_but_neither_recorded_nor_reported() -> None:
    script = answering(("cdn.example.org.", "A", "203.0.113.5"))
    resolver, reports = await _resolver(rules(allow=["api.example.com"]), script)
    reply = await _ask(resolver, "cdn.example.org")
    assert reply.rcode() == dns.rcode.NOERROR and reply.answer[0][0].address == str(PUBLIC)
    assert len(resolver._resolved) == 0  # random unlisted names cannot fill the record
    assert reports == []


async def test_a_policy_update_changes_decisions_and_what_vouches() -> None:
    resolver, _ = await _resolver(ALLOWED, answering(("api.example.com.", "A", "203.0.113.5")))
    await _ask(resolver, "api.example.com")
    resolver.update(rules(allow=["other.example.com"], deny=["0.0.0.0/0"]))
    assert not resolver._resolved.is_resolved_any_allowed(PUBLIC)
    assert (await _ask(resolver, "api.example.com")).rcode() == dns.rcode.REFUSED


async def test_upstream_query_is_fresh_with_random_id_and_0x20_case() -> None:
    upstream, server = await scripted_upstream(answering(("api.example.com.", "A", "203.0.113.5")))
    resolver = SlotResolver("ns", ALLOWED, ResolvedNames(), [server], _no_report)
    guest = query("api.example.com")
    for _ in range(4):
        await resolver.answer(guest.to_wire(), tcp=False)
    asked = upstream.queries
    assert len(asked) == 4
    assert len({q.id for q in asked} | {guest.id}) > 2  # ids are drawn per query
    assert len({q.question[0].name.to_text() for q in asked}) > 1  # so is the case


async def test_forged_answers_are_ignored_and_the_real_one_taken() -> None:
    def script(asked: dns.message.Message) -> list[bytes]:
        forged = dns.message.make_response(asked)
        forged.id = (asked.id + 1) % 65536  # wrong id
        forged.answer = [dns.rrset.from_text("api.example.com.", 3600, "IN", "A", "198.51.100.66")]
        honest = answering(("api.example.com.", "A", "203.0.113.5"))(asked)
        return [forged.to_wire(), b"\x00garbage", *honest]

    resolver, _ = await _resolver(ALLOWED, script)
    reply = await _ask(resolver, "api.example.com")
    assert [rd.address for rd in reply.answer[0]] == ["203.0.113.5"]
    assert not resolver._resolved.is_resolved_for("api.example.com", ip_address("198.51.100.66"))


async def test_an_answer_that_loses_the_0x20_case_is_not_trusted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def script(asked: dns.message.Message) -> list[bytes]:
        # right id, right source, the name's letters in other case: a blind forgery
        swapped = dns.message.make_query(asked.question[0].name.to_text().swapcase(), "A")
        swapped.id = asked.id
        reply = dns.message.make_response(swapped)
        reply.answer = [dns.rrset.from_text("api.example.com.", 60, "IN", "A", "198.51.100.66")]
        return [reply.to_wire()]

    monkeypatch.setattr(dns_upstream, "ROUNDS", 1)
    resolver, reports = await _resolver(rules(allow=["api.example.com"]), script)
    reply = await _ask(resolver, "api.example.com")
    assert reply.rcode() == dns.rcode.SERVFAIL
    assert len(resolver._resolved) == 0 and reports == []


async def test_answers_for_other_names_are_neither_recorded_nor_passed_on() -> None:
    script = answering(("api.example.com.", "A", "203.0.113.5"),
                       ("bank.example.", "A", "198.51.100.1"))
    resolver, reports = await _resolver(ALLOWED, script)
    reply = await _ask(resolver, "api.example.com")
    assert [r.name.to_text() for r in reply.answer] == ["api.example.com."]
    assert not resolver._resolved.is_resolved_any_allowed(ip_address("198.51.100.1"))
    assert reports == [("ns-test", [PUBLIC], 120.0)]


async def test_a_flood_is_dropped_past_the_burst() -> None:
    resolver, _ = await _resolver(rules(deny=["0.0.0.0/0"]), answering())
    resolver._bucket = TokenBucket(QUERIES_PER_SECOND, QUERY_BURST, clock=lambda: 0.0)
    wire = query("x.example.com").to_wire()
    replies = [await resolver.answer(wire, tcp=False) for _ in range(QUERY_BURST + 50)]
    assert all(reply is not None for reply in replies[:QUERY_BURST])
    assert replies[QUERY_BURST:] == [None] * 50


def test_the_bucket_refills_at_its_rate() -> None:
    now = 0.0
    bucket = TokenBucket(10, 5, clock=lambda: now)
    assert [bucket.take() for _ in range(6)] == [True] * 5 + [False]
    now = 0.25  # 2.5 tokens
    assert [bucket.take() for _ in range(3)] == [True, True, False]
    now = 100.0  # never more than the burst
    assert sum(bucket.take() for _ in range(10)) == 5


async def test_no_upstream_answer_is_servfail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dns_upstream, "ATTEMPT_TIMEOUT_S", 0.2)
    resolver, _ = await _resolver(ALLOWED, lambda asked: [])
    assert (await _ask(resolver, "api.example.com")).rcode() == dns.rcode.SERVFAIL


async def test_resolve_follows_the_chain_for_a_and_aaaa() -> None:
    _, server = await scripted_upstream(answering(
        ("www.example.com.", "CNAME", "edge.example.net."),
        ("edge.example.net.", "A", "203.0.113.8")))
    answer = await resolve("www.example.com", [server])
    assert answer.addresses == [ip_address("203.0.113.8")] * 2
    assert answer.ttl_s == 120.0  # the answer's TTL, for the record


async def _no_report(netns: str, addresses: list[IPAddress], ttl: float) -> None:
    raise AssertionError("nothing should be reported")


def test_a_sandboxs_dns_servers_in_private_space_are_never_asked() -> None:
    node = ["192.0.2.53"]
    assert servers_for(rules(dns_servers=["203.0.113.53", "10.0.0.2"]), node) == ["203.0.113.53"]
    assert servers_for(rules(dns_servers=["169.254.169.254", "127.0.0.53"]), node) == node
    assert servers_for(rules(), node) == node


async def test_resolve_of_no_name_at_all_is_empty() -> None:
    assert (await resolve("a" * 64 + ".example.com", ["127.0.0.1:9"])).addresses == []


async def test_queries_are_answered_and_logged_at_debug(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every log call on the query path really builds its record (a field clashing with
    LogRecord's own would raise only once its level is on)."""
    caplog.set_level(logging.DEBUG, logger="aenv_nodeagent.egress")
    monkeypatch.setattr(dns_upstream, "ATTEMPT_TIMEOUT_S", 0.1)
    resolver, _ = await _resolver(ALLOWED, answering(("api.example.com.", "A", "203.0.113.5")))
    assert (await _ask(resolver, "api.example.com")).rcode() == dns.rcode.NOERROR
    silent = SlotResolver("ns-test", ALLOWED, ResolvedNames(), ["127.0.0.1:9"], _no_report)
    assert (await _ask(silent, "api.example.com")).rcode() == dns.rcode.SERVFAIL
    queries = [r for r in caplog.records if r.getMessage() == "dns query"]
    assert [(r.netns, r.host, r.action) for r in queries] == [  # type: ignore[attr-defined]
        ("ns-test", "api.example.com", "forward")] * 2
    assert any(r.getMessage() == "dns upstream failed" for r in caplog.records)
