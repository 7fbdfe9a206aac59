"""The systemd units for real: deploy/systemd/install.sh inside a Debian machine booting its own
systemd under systemd-nspawn (tests/deploy/nspawn_machine.py), aenv.target up, the unmodified
E2B SDK served, a killed service restarted by systemd and the platform serving again, then
`systemctl stop aenv.target` leaving nothing (no QEMU, netns, link, nftables table or cgroup of
the platform, no etcd key of its sandboxes), and the machine powered off leaving nothing on the
host.

The rootfs (scripts/setup-nspawn.sh) has the node's Debian packages and the venv's wheels, so
install.sh runs unmodified and offline. The SDK is this checkout's .venv, run on the host in the
machine's network namespace. The node's settings a 2-core TCG host wants (no warm pool, its own
names' prefix) are a drop-in of the node agent's unit, as an operator would add them."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .nspawn_machine import CHECKOUT, Machine, booted, mounts_under, processes_in

pytestmark = pytest.mark.nspawn

REPO = Path(__file__).resolve().parents[2]
HOST_CACHE = Path.home() / ".aenv" / "cache"
UNITS = ["aenv-etcd.service", "aenv-scheduler.service", "aenv-snapstore.service",
         "aenv-nodeagent.service", "aenv-gateway.service"]
SETUP_TIMEOUT_S = 1800
INSTALL_TIMEOUT_S = 900
# A loaded 2-core host: four services, then the base template's first capture under TCG.
READY_TIMEOUT_S = 900
SDK_TIMEOUT_S = 900
RESTART_TIMEOUT_S = 120
STOP_TIMEOUT_S = 300

# argv[1] "kill": the sandbox is killed at the end; "leave": left running, for the stop to end.
SDK_PROGRAM = """
import json, sys
from e2b import Sandbox
box = Sandbox.create("base", timeout=600, request_timeout=300)
out = box.commands.run("echo hello from $(uname -s)", timeout=300).stdout
def ids(): return [s.sandbox_id for s in Sandbox.list().next_items()]
listed = ids()
if sys.argv[1] == "kill":
    box.kill()
print(json.dumps({"id": box.sandbox_id, "stdout": out, "listed": listed, "after": ids()}))
"""
# Run in the machine by its venv's Python: whether the gateway lists `base` as ready.
BASE_READY = """
import json, urllib.request
key = open("/var/lib/aenv/api-key").read().strip()
request = urllib.request.Request("http://127.0.0.1:3000/default-templates",
                                 headers={"X-API-Key": key})
listed = json.load(urllib.request.urlopen(request, timeout=10))
ready = [t for t in listed if "base" in t.get("names", []) and t.get("buildStatus") == "ready"]
raise SystemExit(0 if ready else 1)
"""


@pytest.fixture(scope="module")
def rootfs() -> Path:
    started = time.monotonic()
    done = subprocess.run(["bash", str(REPO / "scripts" / "setup-nspawn.sh")], check=True,
                          capture_output=True, text=True, timeout=SETUP_TIMEOUT_S)
    print(f"rootfs ready in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return Path(done.stdout.splitlines()[-1])


@pytest.fixture
def machine(rootfs: Path, tmp_path: Path) -> Iterator[Machine]:
    """The booted machine; afterwards (also on failure) powered off, and then nothing of it is
    left on the host: no process of its PID namespace, no mount, no nspawn state."""
    name = f"aenv-test-{secrets.token_hex(3)}"
    cache = HOST_CACHE if HOST_CACHE.is_dir() else None
    with booted(rootfs, tmp_path / "machine", name, cache, REPO) as running:
        yield running
    assert processes_in(running.pid_namespace) == []
    assert mounts_under(tmp_path) == []
    assert not Path("/run/systemd/nspawn/propagate", name).exists()


def install_and_start(machine: Machine, prefix: str) -> dict[str, str]:
    """install.sh from the checkout (it starts aenv.target); returns the SDK's settings once the
    gateway lists `base` as ready."""
    dropin = machine.path("/etc/systemd/system/aenv-nodeagent.service.d")
    dropin.mkdir(parents=True)
    (dropin / "test.conf").write_text("\n".join([
        "[Service]",
        f"Environment=AENV_NODEAGENT_NET_PREFIX={prefix}",
        # Guests only as asked: a 2-core host boots each under TCG.
        "Environment=AENV_NODEAGENT_WARM_POOL_VMS=0",
        "Environment=AENV_NODEAGENT_WARM_POOL_GUESTS=0",
        "Environment=AENV_NODEAGENT_PREWARM_CODE_INTERPRETER=false",
    ]) + "\n")
    started = time.monotonic()
    done = machine.run("bash", f"{CHECKOUT}/deploy/systemd/install.sh",
                       timeout=INSTALL_TIMEOUT_S)
    print(f"install.sh took {time.monotonic() - started:.0f} s", file=sys.stderr)
    # Its steps and systemctl's words; apt's and pip's output is in its log.
    said = (done.stdout + done.stderr).splitlines()
    assert len(said) <= 12, "\n".join(said)
    assert machine.run("systemctl", "is-active", "aenv.target").stdout.strip() == "active"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        probe = machine.run("/opt/aenv/venv/bin/python", "-c", BASE_READY, check=False)
        if probe.returncode == 0:
            print(f"base ready {time.monotonic() - started:.0f} s after install.sh began",
                  file=sys.stderr)
            key = machine.run("cat", "/var/lib/aenv/api-key").stdout.strip()
            url = "http://127.0.0.1:3000"
            return {"E2B_API_KEY": key, "E2B_API_URL": url, "E2B_SANDBOX_URL": url,
                    "E2B_VOLUME_API_URL": url}
        time.sleep(3)
    raise AssertionError(f"base not ready in {READY_TIMEOUT_S} s:\n"
                         f"{machine.journal(*UNITS)}")


def run_sdk(machine: Machine, end: str, sdk_env: dict[str, str]) -> dict[str, Any]:
    done = machine.in_network(sys.executable, "-c", SDK_PROGRAM, end, timeout=SDK_TIMEOUT_S,
                              env={"PATH": "/usr/bin:/bin", **sdk_env})
    assert done.returncode == 0, f"{done.stderr[-4000:]}\n{machine.journal(*UNITS)}"
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return report


def kill_and_see_restarted(machine: Machine, unit: str, grpc_address: str) -> None:
    """SIGKILL to the unit's main process; systemd (Restart=on-failure) starts a new one, which
    then answers gRPC health SERVING (a Type=exec unit is active before it listens)."""
    old = int(machine.unit_property(unit, "MainPID"))
    restarts = int(machine.unit_property(unit, "NRestarts"))
    assert old > 0
    machine.run("kill", "-KILL", str(old))
    deadline = time.monotonic() + RESTART_TIMEOUT_S
    while time.monotonic() < deadline:
        pid = int(machine.unit_property(unit, "MainPID"))
        active = machine.unit_property(unit, "ActiveState")
        if active == "active" and pid not in (0, old):
            assert int(machine.unit_property(unit, "NRestarts")) == restarts + 1
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"{unit} not restarted in {RESTART_TIMEOUT_S} s:\n"
                             f"{machine.journal(unit)}")
    while time.monotonic() < deadline:
        probe = machine.run("/opt/aenv/venv/bin/python", "-m", "aenv_cli.healthcheck",
                            grpc_address, check=False)
        if probe.returncode == 0:
            return
        time.sleep(0.5)
    raise AssertionError(f"{unit} not serving in {RESTART_TIMEOUT_S} s:\n"
                         f"{machine.journal(unit)}")


def stop_and_wait(machine: Machine) -> None:
    """`systemctl stop aenv.target` queues its units' stops (PartOf=) and returns: wait until
    every unit is inactive, each having ended cleanly."""
    machine.run("systemctl", "stop", "aenv.target", timeout=STOP_TIMEOUT_S)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        states = {unit: machine.unit_property(unit, "ActiveState") for unit in UNITS}
        if all(state in ("inactive", "failed") for state in states.values()):
            assert set(states.values()) == {"inactive"}, f"{states}\n{machine.journal(*UNITS)}"
            return
        time.sleep(0.5)
    raise AssertionError(f"aenv.target's units still up after {STOP_TIMEOUT_S} s: {states}")


def leftovers(machine: Machine) -> dict[str, list[str]]:
    """What the platform could leave in the machine: QEMUs, netns, links other than lo,
    nftables tables, cgroups of its units or VMs (the machine's own hierarchies)."""
    def lines(*argv: str) -> list[str]:
        return machine.run(*argv).stdout.split("\n")

    qemus = [line for line in lines("ps", "-eo", "args") if "qemu-system" in line]
    links = [line for line in lines("ip", "-o", "link", "show") if line and ": lo:" not in line]
    cgroups = lines("find", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified",
                    "-name", "aenv*")
    return {"qemu": qemus, "netns": [x for x in lines("ip", "netns", "list") if x],
            "links": links, "nft": [x for x in lines("nft", "list", "tables") if x],
            "cgroups": [x for x in cgroups if x]}


# The cluster's history of sandboxes (events, death certificates): kept on purpose, under a
# retention lease, after a sandbox has gone. Every other key naming a sandbox is its state.
HISTORY = ("/aenv/v1/events/", "/aenv/v1/sandbox-events/", "/aenv/v1/key-events/",
           "/aenv/v1/deaths/")


def etcd_keys_naming(machine: Machine, ids: list[str]) -> list[str]:
    """etcd's keys naming any of the ids: etcd alone started again to look, then stopped."""
    machine.run("systemctl", "start", "aenv-etcd.service", timeout=120)
    try:
        keys = machine.run("etcdctl", "--endpoints=127.0.0.1:2379", "get", "", "--prefix",
                           "--keys-only", env={"ETCDCTL_API": "3"}).stdout.split()
    finally:
        machine.run("systemctl", "stop", "aenv-etcd.service", timeout=120)
    return [key for key in keys if any(sandbox_id in key for sandbox_id in ids)]


def test_systemd_units_serve_restart_and_stop_clean(machine: Machine) -> None:
    prefix = "ans" + secrets.token_hex(2) + "x"
    sdk_env = install_and_start(machine, prefix)

    first = run_sdk(machine, "kill", sdk_env)
    assert first["stdout"] == "hello from Linux\n"
    assert first["id"] in first["listed"] and first["id"] not in first["after"]

    kill_and_see_restarted(machine, "aenv-scheduler.service", "127.0.0.1:50051")
    second = run_sdk(machine, "leave", sdk_env)
    assert second["stdout"] == "hello from Linux\n" and second["id"] in second["after"]
    assert any(prefix in line for line in machine.run("ip", "netns", "list").stdout.split("\n"))

    stop_and_wait(machine)
    assert leftovers(machine) == {"qemu": [], "netns": [], "links": [], "nft": [],
                                  "cgroups": []}
    ids = [str(first["id"]), str(second["id"])]
    keys = etcd_keys_naming(machine, ids)
    assert [key for key in keys if not key.startswith(HISTORY)] == []
    # The stop ended the second by the node agent's hand: a death on record (an owner's kill,
    # the first's, is no death).
    assert f"/aenv/v1/deaths/{second['id']}" in keys, keys

