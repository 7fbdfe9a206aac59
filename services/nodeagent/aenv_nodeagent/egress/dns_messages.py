"""The platform resolver's pure half: what to do with a guest's query, and the reply it gets.

By name, with the policy's precedence (allow wins over deny): a name the policy allows by name
is forwarded; a name it denies by name answers NXDOMAIN; an unlisted name is forwarded while
unlisted traffic is allowed, and answers REFUSED when the policy denies all unlisted traffic
(then DNS itself could carry data out: no query of an unlisted name leaves the node). A query
that is not one well-formed question answers FORMERR, another opcode NOTIMP, a zone transfer
or a class other than IN REFUSED.

A forwarded answer reaches the guest rebuilt, never as upstream's bytes: the question as the
guest asked it, the answer section reduced to the CNAME chain of that name (an answer "for"
other names is dropped), every TTL capped by what the resolver records, so the guest never
caches an address longer than the egress path accepts it.
"""

from __future__ import annotations

import enum
import ipaddress
import struct
from collections.abc import Iterable

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from aenv_common.egress.policy import EgressRules, NameClass

from .resolved import MAX_TTL_S, IPAddress, clamp_ttl

MAX_GUEST_QUERY = 4096  # a legitimate single question is far smaller
_ADDRESS_TYPES = (dns.rdatatype.A, dns.rdatatype.AAAA)
_REFUSED_TYPES = (dns.rdatatype.AXFR, dns.rdatatype.IXFR)
_HEADER = struct.Struct("!HHHHHH")


class Action(enum.Enum):
    FORWARD = "forward"
    NXDOMAIN = "nxdomain"
    REFUSED = "refused"


class BadQuery(Exception):
    """Not a query the resolver answers; ``reply`` is what the guest gets (None: silence)."""

    def __init__(self, reply: bytes | None) -> None:
        super().__init__("bad DNS query")
        self.reply = reply


def action_for(rules: EgressRules, name: str) -> Action:
    named = rules.classify_name(name)
    if named is NameClass.ALLOWED:
        return Action.FORWARD
    if named is NameClass.DENIED:
        return Action.NXDOMAIN
    return Action.REFUSED if rules.denies_unlisted else Action.FORWARD


def parse_query(wire: bytes) -> dns.message.Message:
    """The guest's query, or BadQuery carrying the error reply."""
    if len(wire) < _HEADER.size or len(wire) > MAX_GUEST_QUERY:
        raise BadQuery(None)
    query_id, flags = _HEADER.unpack_from(wire)[:2]
    if flags & dns.flags.QR:
        raise BadQuery(None)  # a response sent to us: never answer (no reflection loops)
    try:
        query = dns.message.from_wire(wire)
    except (dns.exception.DNSException, ValueError):
        raise BadQuery(_header_only(query_id, flags, dns.rcode.FORMERR)) from None
    if query.opcode() != dns.opcode.QUERY:
        raise BadQuery(error_reply(query, dns.rcode.NOTIMP))
    if len(query.question) != 1 or query.answer or query.authority:
        raise BadQuery(error_reply(query, dns.rcode.FORMERR))
    question = query.question[0]
    if question.rdclass != dns.rdataclass.IN or question.rdtype in _REFUSED_TYPES:
        raise BadQuery(error_reply(query, dns.rcode.REFUSED))
    return query


def question_name(query: dns.message.Message) -> str:
    return query.question[0].name.to_text(omit_final_dot=True).lower()


def error_reply(query: dns.message.Message, rcode: dns.rcode.Rcode) -> bytes:
    reply = dns.message.make_response(query, recursion_available=True)
    reply.set_rcode(rcode)
    return reply.to_wire()


def chain_addresses(
    answer: Iterable[dns.rrset.RRset], qname: dns.name.Name,
) -> tuple[list[dns.rrset.RRset], list[IPAddress], float]:
    """The rrsets of ``qname``'s CNAME chain, its A/AAAA addresses and the chain's lowest TTL
    clamped as recorded. Records for names outside the chain are left out."""
    rrsets = list(answer)
    chain = {qname}
    kept: set[int] = set()  # indices into rrsets
    addresses: list[IPAddress] = []
    ttls: list[int] = []
    for _ in range(len(rrsets)):  # CNAMEs may come in any order
        grew = False
        for index, rrset in enumerate(rrsets):
            if index in kept or rrset.name not in chain:
                continue
            kept.add(index)
            ttls.append(rrset.ttl)
            if rrset.rdtype == dns.rdatatype.CNAME:
                chain.add(rrset[0].target)
                grew = True
            elif rrset.rdtype in _ADDRESS_TYPES:
                addresses.extend(ipaddress.ip_address(rd.address) for rd in rrset)
        if not grew:
            break
    in_order = [rrset for index, rrset in enumerate(rrsets) if index in kept]
    return in_order, addresses, clamp_ttl(min(ttls, default=0))


def guest_reply(
    query: dns.message.Message, upstream: dns.message.Message, chain: list[dns.rrset.RRset],
    ttl_cap: float,
) -> dns.message.Message:
    """The reply to the guest: upstream's rcode, its chain renamed to the guest's spelling of
    the question, upstream's authority and additional records, every TTL <= ``ttl_cap``."""
    reply = dns.message.make_response(query, recursion_available=True)
    reply.set_rcode(upstream.rcode())
    asked = query.question[0].name
    reply.answer = [_copy(r, asked if r.name == asked else r.name, ttl_cap) for r in chain]
    reply.authority = [_copy(r, r.name, MAX_TTL_S) for r in upstream.authority]
    reply.additional = [_copy(r, r.name, MAX_TTL_S) for r in upstream.additional]
    return reply


def reply_wire(reply: dns.message.Message, max_size: int) -> bytes:
    """``reply`` within ``max_size``, or an empty truncated one (the guest retries on TCP)."""
    try:
        return reply.to_wire(max_size=max_size)
    except dns.exception.TooBig:
        reply.answer, reply.authority, reply.additional = [], [], []
        reply.flags |= dns.flags.TC
        return reply.to_wire()


def udp_limit(query: dns.message.Message) -> int:
    return max(512, min(query.payload, 4096)) if query.edns >= 0 else 512


def _copy(rrset: dns.rrset.RRset, name: dns.name.Name, ttl_cap: float) -> dns.rrset.RRset:
    return dns.rrset.from_rdata_list(name, int(min(rrset.ttl, ttl_cap)), list(rrset))


def _header_only(query_id: int, flags: int, rcode: int) -> bytes:
    opcode_and_rd = flags & (0x7800 | dns.flags.RD)
    return _HEADER.pack(query_id, dns.flags.QR | dns.flags.RA | opcode_and_rd | rcode, 0, 0, 0, 0)
