"""ResolvedSets: what may enter a slot's resolved sets, batching, and never shortening."""

from __future__ import annotations

import asyncio
import random
import re
import string
import threading
from collections.abc import AsyncIterator
from functools import partial
from ipaddress import IPv4Address, IPv6Address, ip_address

import pytest

from aenv_common.errors import NotFound
from aenv_nodeagent.network import NetSlot, NetworkConfig, NetworkManager, slotops
from aenv_nodeagent.network.namespaces import run_in_fresh_thread
from aenv_nodeagent.network.resolved_sets import ResolvedSets, render_additions
from aenv_testing.subnets import free_subnet

from ..network.helpers import remove_everything_named
from ..policies import egress
from .dnsnet import ensure_resolved_sets, set_elements


def test_additions_keep_public_addresses_only() -> None:
    script = render_additions({
        IPv4Address("203.0.113.5"): 60,
        IPv4Address("10.0.0.1"): 60,  # private
        IPv4Address("127.0.0.1"): 60,  # loopback
        IPv4Address("198.51.100.7"): 30,  # the node's own, below
        IPv6Address("2001:db8::5"): 90,
        IPv6Address("fe80::1"): 90,  # link-local
    }, host_addresses=["198.51.100.7", "10.0.0.9"])
    assert script.splitlines() == [
        "add element inet aenv resolved4 { 203.0.113.5 timeout 60s }",
        "add element inet aenv resolved6 { 2001:db8::5 timeout 90s }",
    ]
    assert render_additions({IPv4Address("10.0.0.1"): 60}) == ""


def test_an_element_being_extended_is_replaced_in_the_same_transaction() -> None:
    old, new = IPv4Address("203.0.113.5"), IPv4Address("203.0.113.6")
    script = render_additions({old: 600, new: 60}, present={old})
    assert script.splitlines() == [
        "add element inet aenv resolved4 { 203.0.113.5 }",
        "delete element inet aenv resolved4 { 203.0.113.5 }",
        "add element inet aenv resolved4 { 203.0.113.5 timeout 600s, 203.0.113.6 timeout 60s }",
    ]


@pytest.fixture
async def slot_sets() -> AsyncIterator[tuple[NetSlot, ResolvedSets]]:
    prefix = "p4s" + "".join(random.choices(string.ascii_lowercase, k=4))
    config = NetworkConfig(prefix=prefix, pool_cidr=free_subnet(22))
    manager = NetworkManager(config)
    try:
        slot = await manager.create_slot(egress())
        await run_in_fresh_thread(partial(ensure_resolved_sets, slot.netns), name="test-sets")
        yield slot, ResolvedSets(config)
    finally:
        await manager.destroy_orphans(keep=set())
        await asyncio.to_thread(remove_everything_named, prefix)


def _timeouts(listing: str) -> dict[str, int]:
    """Each element's timeout in seconds, from nft's listing ("1m30s")."""
    unit = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    return {
        address: sum(int(n) * unit[u] for n, u in re.findall(r"(\d+)([dhms])", duration))
        for address, duration in re.findall(r"([0-9a-f.:]+) timeout ((?:\d+[dhms])+)", listing)
    }


@pytest.mark.netns
async def test_concurrent_reports_are_batched_and_all_land(
    slot_sets: tuple[NetSlot, ResolvedSets], monkeypatch: pytest.MonkeyPatch,
) -> None:
    slot, sets = slot_sets
    transactions = 0
    apply = slotops.apply_in_slot

    def counting(*args: object) -> None:
        nonlocal transactions
        transactions += 1
        apply(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(slotops, "apply_in_slot", counting)
    reports = [sets.add(slot.netns, [f"203.0.113.{i}", "10.9.9.9"], 60) for i in range(1, 41)]
    await asyncio.gather(*reports)
    listing = await run_in_fresh_thread(set_elements(slot.netns), name="test-list")
    assert set(_timeouts(listing)) == {f"203.0.113.{i}" for i in range(1, 41)}
    assert "10.9.9.9" not in listing
    assert transactions <= 3  # the first alone, the rest queued behind it in one or two


@pytest.mark.netns
async def test_an_address_is_extended_never_shortened(
    slot_sets: tuple[NetSlot, ResolvedSets],
) -> None:
    slot, sets = slot_sets
    listing = set_elements(slot.netns)
    await sets.add(slot.netns, [ip_address("203.0.113.7")], 300)
    await sets.add(slot.netns, [ip_address("203.0.113.7")], 10)
    assert _timeouts(await run_in_fresh_thread(listing, name="t"))["203.0.113.7"] == 300
    await sets.add(slot.netns, ["203.0.113.7"], 900)
    assert _timeouts(await run_in_fresh_thread(listing, name="t"))["203.0.113.7"] == 900
    # after the sets were emptied (a policy update), the next answer is written again
    await run_in_fresh_thread(
        partial(slotops.apply_in_slot, slot, lambda _: "flush set inet aenv resolved4\n"),
        name="t")
    sets.forget(slot.netns)
    await sets.add(slot.netns, ["203.0.113.7"], 20)
    assert _timeouts(await run_in_fresh_thread(listing, name="t"))["203.0.113.7"] == 20


async def test_an_unknown_slot_is_not_found() -> None:
    sets = ResolvedSets(NetworkConfig(prefix="p4none", pool_cidr="10.250.0.0/22"))
    with pytest.raises(NotFound):
        await sets.add("someone-else-3", ["203.0.113.1"], 60)


@pytest.mark.netns
async def test_sets_emptied_during_a_write_are_written_again(
    slot_sets: tuple[NetSlot, ResolvedSets], monkeypatch: pytest.MonkeyPatch,
) -> None:
    slot, sets = slot_sets
    apply = slotops.apply_in_slot
    applied, go_on = threading.Event(), threading.Event()

    def held(*args: object) -> None:
        apply(*args)  # type: ignore[arg-type]
        applied.set()
        go_on.wait(10)

    monkeypatch.setattr(slotops, "apply_in_slot", held)
    adding = asyncio.ensure_future(sets.add(slot.netns, ["203.0.113.8"], 300))
    assert await asyncio.to_thread(applied.wait, 10)
    # A policy update empties the sets while the write is still in flight.
    flush = "flush set inet aenv resolved4\n"
    await run_in_fresh_thread(partial(apply, slot, lambda _: flush), name="t")
    sets.forget(slot.netns)
    go_on.set()
    await adding
    monkeypatch.setattr(slotops, "apply_in_slot", apply)
    await sets.add(slot.netns, ["203.0.113.8"], 200)  # written again, not taken as held
    listing = await run_in_fresh_thread(set_elements(slot.netns), name="t")
    assert _timeouts(listing) == {"203.0.113.8": 200}
