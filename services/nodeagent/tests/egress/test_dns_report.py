"""Reporter: an address recently reported is not reported again, and the guest's TTL never
outlives what the agent's sets hold."""

from __future__ import annotations

from ipaddress import IPv4Address

from aenv_nodeagent.egress.dns_report import Reporter
from aenv_nodeagent.egress.resolved import IPAddress

A, B = IPv4Address("203.0.113.1"), IPv4Address("203.0.113.2")
PRIVATE = IPv4Address("10.0.0.1")


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_reports_are_spared_while_the_sets_hold_half_the_ttl() -> None:
    sent: list[tuple[str, list[IPAddress], float]] = []

    async def report(netns: str, addresses: list[IPAddress], ttl: float) -> None:
        sent.append((netns, addresses, ttl))

    clock = Clock()
    reporter = Reporter("ns", report, clock)
    assert await reporter.vouch([A, PRIVATE], 100) == 100
    assert sent == [("ns", [A], 100)]  # private addresses are never reported

    clock.now += 40  # 60 s held >= half of 100: the guest gets the 60 s left
    assert await reporter.vouch([A], 100) == 60
    clock.now += 20  # 40 s held < 50: reported again, full TTL
    assert await reporter.vouch([A], 100) == 100
    assert len(sent) == 2

    assert await reporter.vouch([A, B], 100) == 100  # B never reported: both again
    assert sent[-1] == ("ns", [A, B], 100)
    reporter.reset()  # a policy update may have emptied the sets
    await reporter.vouch([A], 100)
    assert len(sent) == 4


async def test_a_failed_report_is_retried_next_time() -> None:
    calls = 0

    async def failing(netns: str, addresses: list[IPAddress], ttl: float) -> None:
        nonlocal calls
        calls += 1
        raise ConnectionError("agent gone")

    reporter = Reporter("ns", failing, Clock())
    assert await reporter.vouch([A], 30) == 30
    await reporter.vouch([A], 30)
    assert calls == 2
