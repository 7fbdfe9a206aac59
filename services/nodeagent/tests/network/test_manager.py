"""NetworkManager against the real kernel: netns, veth, tap, nftables, QEMU attaching to the tap."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable

import pytest
from pyroute2 import IPRoute

from aenv_common.errors import Conflict, Internal, ResourceExhausted
from aenv_nodeagent.network import (
    NetSlot,
    NetworkConfig,
    NetworkManager,
    netns_exec_prefix,
    slotops,
)
from aenv_nodeagent.network.namespaces import list_netns, run_in_fresh_thread
from aenv_nodeagent.network.nft import run_nft
from aenv_nodeagent.network.slots import GATEWAY_IP, TAP_MAC, TAP_NAME
from aenv_testing.subnets import free_subnet

from ..policies import egress
from .helpers import (
    INTERNET_SERVER_IP,
    attach_fake_guest,
    attach_fake_internet,
    in_netns,
    serve_payload,
    try_connect,
)

pytestmark = pytest.mark.netns

NO_INTERNET = egress(allow_internet=False)


def kernel_objects(prefix: str) -> list[str]:
    """Every netns and root-netns link whose name starts with ``prefix``."""
    links = os.listdir("/sys/class/net")
    return sorted(n for n in [*links, *list_netns()] if n.startswith(prefix))


def addresses_of(link: str) -> list[str]:
    with IPRoute() as root:
        index = root.link_lookup(ifname=link)[0]
        return [str(a.get_attr("IFA_ADDRESS")) for a in root.get_addr(index=index, family=2)]


def add_dummy_link(name: str) -> None:
    with IPRoute() as root:
        root.link("add", ifname=name, kind="veth", peer={"ifname": f"{name}p"})


def tap_carrier() -> int:
    """1 once a process (QEMU) has the tap open, 0 before."""
    with IPRoute() as ns:
        return int(ns.get_links(ifname=TAP_NAME)[0].get_attr("IFLA_CARRIER"))


def ns_view(slot: NetSlot) -> dict[str, object]:
    """Links, addresses, forwarding and nft tables as seen inside the slot netns."""
    with IPRoute() as ns:
        links = {
            str(link.get_attr("IFLA_IFNAME")): (
                link.get_attr("IFLA_ADDRESS"),
                link.get_attr("IFLA_OPERSTATE"),
                link.get_attr("IFLA_CARRIER"),
            )
            for link in ns.get_links()
        }
        addresses = sorted(str(a.get_attr("IFA_ADDRESS")) for a in ns.get_addr(family=2))
    with open("/proc/sys/net/ipv4/ip_forward") as sysctl:
        forwarding = sysctl.read().strip()
    return {
        "links": links,
        "addresses": addresses,
        "forwarding": forwarding,
        "nft": run_nft("list tables"),
    }


@pytest.fixture
async def slot(manager: NetworkManager) -> AsyncIterator[NetSlot]:
    created = await manager.create_slot(NO_INTERNET)
    try:
        yield created
    finally:
        await manager.destroy_slot(created)


@pytest.fixture
async def guest(slot: NetSlot, net_config: NetworkConfig) -> str:
    """Name of a netns standing in for the VM behind the slot's tap0 (removed by `manager`)."""
    name = f"{net_config.prefix}-g{slot.index}"
    await in_netns_free(lambda: attach_fake_guest(slot, name))
    return name


@pytest.fixture
async def internet(slot: NetSlot, net_config: NetworkConfig) -> str:
    name = f"{net_config.prefix}-i{slot.index}"
    await in_netns_free(lambda: attach_fake_internet(slot, name))
    return name


async def in_netns_free(fn: Callable[[], None]) -> None:
    """Run netns-switching setup in its own thread."""
    await run_in_fresh_thread(fn, name="test-setup")


async def test_create_builds_every_object_and_destroy_removes_them(
    manager: NetworkManager, net_config: NetworkConfig
) -> None:
    slot = await manager.create_slot(NO_INTERNET)
    assert kernel_objects(net_config.prefix) == sorted([slot.netns, slot.host_veth])
    assert await asyncio.to_thread(addresses_of, slot.host_veth) == [slot.host_ip]
    view = await in_netns(slot.netns, lambda: ns_view(slot))
    assert isinstance(view, dict)
    assert set(view["links"]) == {"lo", "veth0", "tap0"}
    assert view["links"]["tap0"][0] == TAP_MAC
    assert view["addresses"] == sorted(["127.0.0.1", slot.ns_ip, GATEWAY_IP])
    assert view["forwarding"] == "1"
    assert view["nft"] == "table inet aenv\ntable netdev aenv\n"

    await manager.destroy_slot(slot)
    await manager.destroy_slot(slot)  # idempotent
    assert kernel_objects(net_config.prefix) == []
    assert "aenv" not in run_nft("list tables")  # the host's own tables are untouched


async def test_a_released_slot_keeps_its_index_until_its_background_teardown_ends(
    run_prefix: str,
) -> None:
    prefix = f"{run_prefix}zk"
    manager = NetworkManager(NetworkConfig(prefix=prefix, pool_cidr=free_subnet(29)))  # two
    try:
        slot, second = [await manager.create_slot(NO_INTERNET) for _ in range(2)]
        await manager.destroy_slot(second)
        manager.release_slot(slot)
        other = await manager.create_slot(NO_INTERNET)  # built while the release runs
        assert other.index == second.index  # the next search starts at slot's, still held
        await manager.settled()
        assert kernel_objects(prefix) == sorted([other.netns, other.host_veth])
        await manager.destroy_slot(other)
        reused = await manager.create_slot(NO_INTERNET)
        assert reused.index == slot.index  # free again once torn down
    finally:
        await manager.destroy_orphans(keep=set())
    assert kernel_objects(prefix) == []


async def test_a_freed_index_serves_again_only_after_every_other_free_one(
    run_prefix: str,
) -> None:
    """A new VM rarely gets the address of one that just ended: what was kept alive to it
    would reach the new one."""
    manager = NetworkManager(NetworkConfig(prefix=f"{run_prefix}zr", pool_cidr=free_subnet(28)))
    try:
        first = await manager.create_slot(NO_INTERNET)
        await manager.destroy_slot(first)
        given = [await manager.create_slot(NO_INTERNET) for _ in range(3)]
        assert [s.index for s in given] == [1, 2, 3]  # not 0 again, though free
        await manager.destroy_slot(given[1])
        # At the end of the pool: on from its start, where the longest free ones are.
        assert [(await manager.create_slot(NO_INTERNET)).index for _ in range(2)] == [0, 2]
        with pytest.raises(ResourceExhausted):
            await manager.create_slot(NO_INTERNET)
    finally:
        await manager.destroy_orphans(keep=set())
    assert kernel_objects(f"{run_prefix}zr") == []


async def test_host_reaches_every_guest_port_through_dnat(slot: NetSlot, guest: str) -> None:
    port, stop = await serve_payload(guest, slot.guest_ip, "hello from guest")
    try:
        assert await try_connect(None, slot.ns_ip, port) == "hello from guest"
        # another port: the guest itself answers (RST), proving DNAT covers every port
        assert await try_connect(None, slot.ns_ip, port + 1 if port < 65535 else 1) == "refused"
    finally:
        await stop()


async def test_guest_cannot_reach_host_netns_or_private_ranges(
    slot: NetSlot, guest: str, manager: NetworkManager
) -> None:
    host_port, stop_host = await serve_payload(None, slot.host_ip, "host")
    ns_port, stop_ns = await serve_payload(slot.netns, "0.0.0.0", "netns")
    await manager.update_policy(slot, egress(allow_internet=True, allow_out=["0.0.0.0/0"]))
    try:
        # controls: both listeners answer from where they are meant to
        assert await try_connect(None, slot.host_ip, host_port) == "host"
        assert await try_connect(slot.netns, GATEWAY_IP, ns_port) == "netns"
        # from the guest: the host veth, the host's own address space, the gateway: all dropped
        assert await try_connect(guest, slot.host_ip, host_port) == "timeout"
        assert await try_connect(guest, GATEWAY_IP, ns_port) == "timeout"
        assert await try_connect(guest, slot.ns_ip, ns_port) == "timeout"
        assert await try_connect(guest, "192.168.1.1", 80) == "timeout"
    finally:
        await stop_host()
        await stop_ns()


async def test_egress_policy_is_enforced_and_replaced(
    slot: NetSlot, guest: str, internet: str, manager: NetworkManager
) -> None:
    port, stop = await serve_payload(internet, INTERNET_SERVER_IP, "public")
    try:
        assert await try_connect(internet, INTERNET_SERVER_IP, port) == "public"  # control
        assert await try_connect(guest, INTERNET_SERVER_IP, port) == "timeout"  # no internet
        cases = [
            # E2B's precedence: allow wins over deny, allowOut alone restricts nothing.
            (egress(True), "public"),
            (egress(True, deny_out=["198.18.0.0/30"]), "timeout"),
            (egress(True, allow_out=["203.0.113.0/24"]), "public"),
            (egress(True, allow_out=["203.0.113.0/24"], deny_out=["0.0.0.0/0"]), "timeout"),
            (egress(True, allow_out=["198.18.0.2/32"], deny_out=["198.18.0.0/16"]), "public"),
            (egress(True, allow_out=["198.18.0.3"], deny_out=["198.18.0.0/16"]), "timeout"),
            (egress(False, allow_out=["198.18.0.2/32"]), "public"),
            (egress(False), "timeout"),
        ]
        for policy, expected in cases:
            await manager.update_policy(slot, policy)
            assert await try_connect(guest, INTERNET_SERVER_IP, port) == expected, policy
    finally:
        await stop()


async def test_qemu_attaches_to_the_tap(slot: NetSlot) -> None:
    argv = [
        *netns_exec_prefix(slot),
        "qemu-system-x86_64", "-M", "microvm", "-accel", "tcg", "-nodefaults",
        "-no-user-config", "-display", "none", "-S", "-m", "32",
        "-netdev", f"tap,id=n0,ifname={slot.tap},script=no,downscript=no",
        "-device", f"virtio-net-device,netdev=n0,mac={slot.guest_mac}",
    ]  # fmt: skip
    carrier_before = await in_netns(slot.netns, tap_carrier)
    qemu = await asyncio.create_subprocess_exec(*argv, stderr=asyncio.subprocess.PIPE)
    try:
        await asyncio.sleep(1.0)
        carrier_with_qemu = await in_netns(slot.netns, tap_carrier)
        alive = qemu.returncode is None
    finally:
        if qemu.returncode is None:
            qemu.kill()
        _, stderr = await qemu.communicate()
    assert alive, stderr.decode()
    assert (carrier_before, carrier_with_qemu) == (0, 1)


async def test_concurrent_creates_get_distinct_lowest_indices(
    manager: NetworkManager, net_config: NetworkConfig
) -> None:
    slots = await asyncio.gather(*(manager.create_slot(NO_INTERNET) for _ in range(20)))
    assert sorted(s.index for s in slots) == list(range(20))
    assert len(kernel_objects(net_config.prefix)) == 40
    await asyncio.gather(*(manager.destroy_slot(s) for s in slots))
    assert kernel_objects(net_config.prefix) == []


async def test_restart_rediscovers_slots_and_removes_orphans(
    manager: NetworkManager, net_config: NetworkConfig
) -> None:
    kept, orphan, _ = [await manager.create_slot(NO_INTERNET) for _ in range(3)]
    await manager.destroy_slot(_)
    # a half-built slot: host veth left without its netns
    await asyncio.to_thread(add_dummy_link, f"{net_config.prefix}7h")

    restarted = NetworkManager(net_config)
    assert [s.index for s in await restarted.existing_slots()] == [kept.index, orphan.index]
    removed = await restarted.destroy_orphans(keep={kept.netns})
    assert sorted(removed) == sorted([orphan.netns, f"{net_config.prefix}-7"])
    assert kernel_objects(net_config.prefix) == sorted([kept.netns, kept.host_veth])
    # freed index is reused, taken ones are not
    again = await restarted.create_slot(NO_INTERNET)
    assert again.index == orphan.index


async def test_failed_create_leaves_nothing_behind(
    manager: NetworkManager, net_config: NetworkConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_nft(script: str) -> str:
        raise OSError("injected failure")

    monkeypatch.setattr(slotops, "run_nft", broken_nft)
    with pytest.raises(Internal, match="injected failure"):
        await manager.create_slot(NO_INTERNET)
    assert kernel_objects(net_config.prefix) == []


async def test_a_pool_another_agent_uses_is_refused(run_prefix: str) -> None:
    """Two node agents on one host with the same pool would route each other's guests."""
    pool = free_subnet(29)
    first = NetworkManager(NetworkConfig(prefix=f"{run_prefix}ya", pool_cidr=pool))
    second = NetworkManager(NetworkConfig(prefix=f"{run_prefix}yb", pool_cidr=pool))
    slot = await first.create_slot(NO_INTERNET)
    try:
        with pytest.raises(Conflict, match=f"{slot.host_ip} .* already assigned"):
            await second.create_slot(NO_INTERNET)
        assert kernel_objects(f"{run_prefix}yb") == []
    finally:
        await first.destroy_slot(slot)


async def test_full_pool_is_resource_exhausted(run_prefix: str) -> None:
    manager = NetworkManager(NetworkConfig(prefix=f"{run_prefix}zz", pool_cidr=free_subnet(29)))
    try:
        await manager.create_slot(NO_INTERNET)
        await manager.create_slot(NO_INTERNET)
        with pytest.raises(ResourceExhausted):
            await manager.create_slot(NO_INTERNET)
    finally:
        await manager.destroy_orphans(keep=set())
    assert kernel_objects(f"{run_prefix}zz") == []
