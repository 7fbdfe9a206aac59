"""The resolver's pure half: decisions by name, query checks, CNAME chains, replies, truncation."""

from __future__ import annotations

import struct
from ipaddress import ip_address

import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import pytest

from aenv_nodeagent.egress.dns_messages import (
    Action,
    BadQuery,
    action_for,
    chain_addresses,
    guest_reply,
    parse_query,
    reply_wire,
    udp_limit,
)

from .dnsfakes import query, rules


@pytest.mark.parametrize(
    ("allow", "deny", "name", "action"),
    [
        (["api.example.com"], ["0.0.0.0/0"], "api.example.com", Action.FORWARD),
        (["api.example.com"], ["0.0.0.0/0"], "API.Example.COM.", Action.FORWARD),
        (["api.example.com"], ["0.0.0.0/0"], "other.example.com", Action.REFUSED),
        (["*.example.com"], ["0.0.0.0/0"], "a.b.example.com", Action.FORWARD),
        (["*.example.com"], ["0.0.0.0/0"], "example.com", Action.REFUSED),
        ([], ["bad.example.com"], "bad.example.com", Action.NXDOMAIN),
        ([], ["bad.example.com"], "good.example.com", Action.FORWARD),
        ([], ["*.example.com"], "x.example.com", Action.NXDOMAIN),
        # allow wins over deny
        (["api.example.com"], ["*.example.com"], "api.example.com", Action.FORWARD),
        (["api.example.com"], ["*.example.com", "0.0.0.0/0"], "x.example.com", Action.NXDOMAIN),
        # an IP-only deny list does not make names unlisted-denied
        (["api.example.com"], ["203.0.113.0/24"], "elsewhere.org", Action.FORWARD),
    ],
)
def test_names_are_decided_with_the_policys_precedence(
    allow: list[str], deny: list[str], name: str, action: Action,
) -> None:
    assert action_for(rules(allow, deny), name.rstrip(".").lower()) is action


def _rcode(wire: bytes | None) -> dns.rcode.Rcode:
    assert wire is not None
    return dns.message.from_wire(wire).rcode()


def test_garbage_answers_formerr_with_the_guests_id() -> None:
    wire = struct.pack("!HHHHHH", 0xBEEF, 0x0100, 1, 0, 0, 0) + b"\x07trunc"
    with pytest.raises(BadQuery) as caught:
        parse_query(wire)
    assert caught.value.reply is not None
    reply_id, flags = struct.unpack_from("!HH", caught.value.reply)
    assert reply_id == 0xBEEF and flags & dns.flags.QR and flags & 0xF == dns.rcode.FORMERR


@pytest.mark.parametrize("wire", [b"", b"\x00" * 11, b"\x00" * 5000])
def test_too_short_or_too_long_is_not_answered(wire: bytes) -> None:
    with pytest.raises(BadQuery) as caught:
        parse_query(wire)
    assert caught.value.reply is None


def test_a_response_sent_to_the_resolver_is_never_answered() -> None:
    response = dns.message.make_response(query("api.example.com"))
    with pytest.raises(BadQuery) as caught:
        parse_query(response.to_wire())
    assert caught.value.reply is None


def test_two_questions_are_formerr_and_other_opcodes_notimp() -> None:
    two = query("a.example.com")
    two.question.append(query("b.example.com").question[0])
    with pytest.raises(BadQuery) as caught:
        parse_query(two.to_wire())
    assert _rcode(caught.value.reply) == dns.rcode.FORMERR
    notify = query("a.example.com")
    notify.set_opcode(dns.opcode.NOTIFY)
    with pytest.raises(BadQuery) as caught:
        parse_query(notify.to_wire())
    assert _rcode(caught.value.reply) == dns.rcode.NOTIMP


@pytest.mark.parametrize(("rdtype", "rdclass"), [("AXFR", "IN"), ("A", "CH")])
def test_zone_transfers_and_other_classes_are_refused(rdtype: str, rdclass: str) -> None:
    asked = query("example.com", rdtype, rdclass=dns.rdataclass.from_text(rdclass))
    with pytest.raises(BadQuery) as caught:
        parse_query(asked.to_wire())
    assert _rcode(caught.value.reply) == dns.rcode.REFUSED


def _rrset(name: str, ttl: int, rdtype: str, *values: str) -> dns.rrset.RRset:
    return dns.rrset.from_text_list(name, ttl, "IN", rdtype, list(values))


def test_the_chain_keeps_cnames_of_the_question_and_drops_other_names() -> None:
    answer = [
        _rrset("cdn.example.net.", 300, "A", "203.0.113.7"),  # before its CNAME: order-free
        _rrset("www.example.com.", 600, "CNAME", "edge.example.org."),
        _rrset("edge.example.org.", 60, "CNAME", "cdn.example.net."),
        _rrset("bank.example.", 86400, "A", "198.51.100.1"),  # poison for another name
    ]
    kept, addresses, ttl = chain_addresses(answer, dns.name.from_text("WWW.example.com."))
    assert addresses == [ip_address("203.0.113.7")]
    assert ttl == 60.0  # the chain's lowest
    assert [r.name.to_text() for r in kept] == [
        "cdn.example.net.", "www.example.com.", "edge.example.org."]


def test_a_chain_ttl_is_clamped() -> None:
    answer = [_rrset("a.example.com.", 0, "A", "203.0.113.1")]
    assert chain_addresses(answer, dns.name.from_text("a.example.com."))[2] == 5.0
    answer = [_rrset("a.example.com.", 86400 * 7, "A", "203.0.113.1")]
    assert chain_addresses(answer, dns.name.from_text("a.example.com."))[2] == 3600.0


def test_the_guest_reply_echoes_its_spelling_and_caps_ttls() -> None:
    guest = query("Api.Example.com")
    upstream = dns.message.make_response(query("aPI.eXAMPLE.COM"))
    upstream.answer = [_rrset("aPI.eXAMPLE.COM.", 86400, "A", "203.0.113.9")]
    upstream.authority = [_rrset("example.com.", 86400 * 30, "NS", "ns.example.com.")]
    kept, _, ttl = chain_addresses(upstream.answer, upstream.question[0].name)
    reply = dns.message.from_wire(reply_wire(guest_reply(guest, upstream, kept, ttl), 512))
    assert reply.id == guest.id and reply.flags & dns.flags.RA
    assert [r.name.labels for r in reply.answer] == [guest.question[0].name.labels]
    assert reply.answer[0].ttl == 3600 and reply.authority[0].ttl == 3600


def test_an_oversized_udp_reply_is_truncated_for_a_retry_over_tcp() -> None:
    guest = query("many.example.com")
    upstream = dns.message.make_response(guest)
    upstream.answer = [_rrset("many.example.com.", 60, "A",
                              *(f"203.0.113.{i}" for i in range(1, 60)))]
    kept, _, ttl = chain_addresses(upstream.answer, guest.question[0].name)
    wire = reply_wire(guest_reply(guest, upstream, kept, ttl), udp_limit(guest))
    reply = dns.message.from_wire(wire)
    assert len(wire) <= 512 and reply.flags & dns.flags.TC and not reply.answer
    full = reply_wire(guest_reply(guest, upstream, kept, ttl), 65535)
    assert len(dns.message.from_wire(full).answer[0]) == 59


def test_the_udp_limit_follows_the_guests_edns_size() -> None:
    assert udp_limit(query("a.example.com")) == 512
    assert udp_limit(query("a.example.com", use_edns=0, payload=1400)) == 1400
    assert udp_limit(query("a.example.com", use_edns=0, payload=65000)) == 4096
