"""Asking upstream DNS servers on a sandbox's behalf, so that what comes back can be trusted.

A guest's query is never relayed as bytes: the resolver asks a fresh question of its own, with
a random id, a fresh source port per attempt (the kernel's ephemeral choice), and the name's
letters in random case (DNS 0x20). An answer counts only if it comes from the server asked, with
that id and the question echoed with exactly those letters; anything else is a spoofing attempt
and is ignored. A guest that floods our source port with forged answers would have to guess
all three within one query's lifetime, and each slot's resolver has its own state, so nothing
one sandbox manages to inject reaches another.

UDP first; a truncated answer is asked again over TCP. Each server gets a short timeout and the
round moves to the next one; two rounds before SERVFAIL.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from ipaddress import ip_address

import dns.asyncquery
import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rdataclass
import dns.rdatatype

log = logging.getLogger(__name__)

ATTEMPT_TIMEOUT_S = 2.0
ROUNDS = 2
UPSTREAM_PAYLOAD = 1232  # the EDNS size that avoids IP fragmentation on the usual paths


class UpstreamFailed(Exception):
    """No server gave a trustworthy answer in time."""


def split_server(server: str) -> tuple[str, int]:
    """``1.2.3.4``, ``1.2.3.4:5353``, ``2001:db8::1`` or ``[2001:db8::1]:5353``."""
    text = server.strip()
    if text.startswith("["):
        host, _, port = text[1:].partition("]:")
        return str(ip_address(host.rstrip("]"))), int(port or 53)
    if text.count(":") == 1:
        host, port = text.split(":")
        return str(ip_address(host)), int(port)
    return str(ip_address(text)), 53


def randomize_case(name: dns.name.Name) -> dns.name.Name:
    """The same name with each ASCII letter's case drawn at random (DNS 0x20)."""
    labels = []
    for label in name.labels:
        mask = secrets.randbits(max(len(label), 1))
        labels.append(bytes(
            c ^ 0x20 if (mask >> i) & 1 and chr(c).isalpha() else c
            for i, c in enumerate(label.lower())))
    return dns.name.Name(labels)


def upstream_query(
    qname: dns.name.Name, rdtype: dns.rdatatype.RdataType,
    rdclass: dns.rdataclass.RdataClass = dns.rdataclass.IN, dnssec: bool = False,
) -> dns.message.QueryMessage:
    query = dns.message.make_query(
        randomize_case(qname), rdtype, rdclass, use_edns=0, payload=UPSTREAM_PAYLOAD,
        want_dnssec=dnssec)
    query.id = secrets.randbits(16)
    return query


def echoes_question(query: dns.message.Message, answer: dns.message.Message) -> bool:
    """Exact echo, letter case included: dnspython's own check ignores case."""
    if len(answer.question) != 1 or len(query.question) != 1:
        return False
    asked, got = query.question[0], answer.question[0]
    return (got.name.labels == asked.name.labels and got.rdtype == asked.rdtype
            and got.rdclass == asked.rdclass)


async def exchange(query: dns.message.Message, servers: Sequence[str]) -> dns.message.Message:
    """The first trustworthy answer from ``servers``, tried in order, ``ROUNDS`` times."""
    if not servers:
        raise UpstreamFailed("no upstream DNS servers configured")
    for _ in range(ROUNDS):
        for server in servers:
            answer = await _ask(query, server)
            if answer is not None:
                return answer
    raise UpstreamFailed(f"no answer from {len(servers)} upstream DNS server(s)")


async def _ask(query: dns.message.Message, server: str) -> dns.message.Message | None:
    host, port = split_server(server)
    try:
        # Datagrams from elsewhere, with another id or question, or unparsable are dropped and
        # the wait goes on for the real answer.
        answer = await dns.asyncquery.udp(
            query, host, timeout=ATTEMPT_TIMEOUT_S, port=port, ignore_unexpected=True,
            ignore_errors=True)
        if answer.flags & dns.flags.TC:
            answer = await dns.asyncquery.tcp(query, host, timeout=ATTEMPT_TIMEOUT_S, port=port)
    except (dns.exception.DNSException, OSError, ValueError) as exc:
        log.debug("upstream DNS attempt failed", extra={"server": server, "error": repr(exc)})
        return None
    if answer.id != query.id or not echoes_question(query, answer):
        log.warning("upstream DNS answer did not echo the question", extra={"server": server})
        return None
    return answer

