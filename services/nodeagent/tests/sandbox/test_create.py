"""Creating a sandbox from a template: what a success registers and publishes, and that a failure
at any step of the restore pipeline leaves nothing behind."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import (
    AenvError,
    Conflict,
    DeadlineExceeded,
    Internal,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from aenv_common.limits import MAX_TIMEOUT_S
from aenv_nodeagent.sandbox.restore import identity_env

from ..fakes.envd import FAKE_ENVD_VERSION
from .conftest import PAUSED, RUNNING, TEMPLATE, Wing

# A create's phases, each timed (sandbox.timings_ms).
CREATE_PHASES = {"template", "network", "overlay", "launch", "restore",
                 "envd_init", "publish"}


async def test_a_create_restores_the_template_and_publishes_a_running_record(wing: Wing) -> None:
    spec = wing.spec(metadata={"team": "a"}, env_vars={"K": "v"})
    sandbox = await wing.service.creates.create(spec)
    sandbox_id, directory = spec.sandbox_id, wing.directory(spec.sandbox_id)

    assert wing.service.registry.get(sandbox_id) is sandbox
    assert wing.service.registry.all() == [sandbox]
    assert sandbox.directory == directory
    assert CREATE_PHASES <= set(sandbox.timings_ms)
    assert wing.records.states(sandbox_id) == [RUNNING]
    record = wing.records.records[sandbox_id]
    assert (record.node_id, record.template_id, record.base_template_id) == (
        "fake-node", TEMPLATE, TEMPLATE)
    assert record.envd_version == FAKE_ENVD_VERSION  # what the guest's /init answered
    assert (record.resources.vcpus, record.resources.memory_mib) == (1, 128)
    assert dict(record.metadata) == {"team": "a"}
    await wing.allocations.reached(1)  # after the answer

    # One VM, launched to take the template's state, its RAM the template's memory file and
    # its root disk a new overlay over the template's disk.
    [vm] = wing.driver.launched
    assert vm is wing.vm(sandbox)
    assert vm.incoming
    assert vm.spec.mem_path == wing.template.memory
    assert vm.spec.disks[0].path == directory / "disk.qcow2"
    assert vm.chains["root"].backing_files == [wing.template.disk]
    [restore] = [call for call in vm.calls if call.method == "restore"]
    assert restore.arguments["state_path"] == wing.template.state
    assert await vm.status() == "running"
    # E2B's default variables name this sandbox; the sandbox's own come beside them.
    assert wing.envd.env_vars[sandbox.slot.ns_ip] == {
        "E2B_SANDBOX": "true", "E2B_SANDBOX_ID": sandbox_id, "E2B_TEMPLATE_ID": TEMPLATE,
        "K": "v"}

    # Its own slot; envd was handed the sandbox's token (a template's guest enforces none).
    assert wing.network.live == [sandbox.slot]
    init = [call for call in wing.envd.calls if call.method == "init"]
    assert [(c.host, c.access_token, c.current_token) for c in init] == [
        (sandbox.slot.ns_ip, spec.envd_access_token, None)]
    # The /init is its guest's first request: no /health probe before it.
    assert wing.envd.methods_called() == ["init"]


def test_a_built_templates_sandbox_knows_the_template_by_e2bs_id() -> None:
    record = cluster_pb2.SandboxRecord(sandbox_id="s1", template_id="build-1",
                                       catalog_template_id="tpl-1")
    assert identity_env(record)["E2B_TEMPLATE_ID"] == "tpl-1"
    assert identity_env(cluster_pb2.SandboxRecord(template_id="base"))["E2B_TEMPLATE_ID"] == (
        "base")


async def test_sandboxes_get_slots_and_directories_of_their_own(wing: Wing) -> None:
    first, second = await wing.create(), await wing.create()
    assert first.slot != second.slot
    assert wing.network.live == [first.slot, second.slot]
    assert first.directory != second.directory
    running = wing.service.registry.all()
    assert {s.sandbox_id for s in running} == {first.sandbox_id, second.sandbox_id}


# --- a failure at each step --------------------------------------------------------------------

Heal = Callable[[], object]  # undoes the fault


def fail_network(wing: Wing) -> Heal:
    wing.network.create_failures.append(Internal("creating network slot failed"))
    return lambda: None


def fail_overlay(wing: Wing) -> Heal:
    disk = wing.template.disk
    kept = disk.read_bytes()
    disk.unlink()  # the overlay cannot read its backing's header
    return lambda: disk.write_bytes(kept)


def fail_launch(wing: Wing) -> Heal:
    wing.driver.launch_failures.append(Internal("QEMU failed to start"))
    return lambda: None


def fail_restore(wing: Wing) -> Heal:
    wing.driver.vm_fail_on["restore"] = Internal("QMP migrate-incoming failed")
    return wing.driver.vm_fail_on.clear


def corrupt_state(wing: Wing) -> Heal:
    state = wing.template.state
    kept = state.read_bytes()
    state.write_bytes(b"not a migration stream")
    return lambda: state.write_bytes(kept)


def fail_envd_unanswered(wing: Wing) -> Heal:
    wing.envd.fail_on["init"] = DeadlineExceeded("envd did not answer /init within 60s")
    return wing.envd.fail_on.clear


def fail_envd_init(wing: Wing) -> Heal:
    wing.envd.fail_on["init"] = Internal("envd /init failed: HTTP 500")
    return wing.envd.fail_on.clear


def fail_publish(wing: Wing) -> Heal:
    wing.records.put_failures.append(Unavailable("etcd is unavailable"))
    return lambda: None


@pytest.mark.parametrize(("arrange", "error", "launches"), [
    pytest.param(fail_network, Internal, False, id="network"),
    pytest.param(fail_overlay, Internal, False, id="overlay"),
    pytest.param(fail_launch, Internal, False, id="launch"),
    pytest.param(fail_restore, Internal, True, id="restore"),
    pytest.param(corrupt_state, Internal, True, id="corrupt-state"),
    pytest.param(fail_envd_unanswered, DeadlineExceeded, True, id="envd-unanswered"),
    pytest.param(fail_envd_init, Internal, True, id="envd-init"),
    pytest.param(fail_publish, Unavailable, True, id="publish"),
])
async def test_a_create_that_fails_at_any_step_leaves_nothing(
    wing: Wing, arrange: Callable[[Wing], Heal], error: type[AenvError], launches: bool,
) -> None:
    heal = arrange(wing)
    spec = wing.spec()

    with pytest.raises(error):
        await wing.service.creates.create(spec)

    sandbox_id = spec.sandbox_id
    assert not wing.service.registry.has(sandbox_id)
    assert wing.service.registry.all() == []
    assert not wing.directory(sandbox_id).exists()
    assert wing.network.live == []
    assert sandbox_id not in wing.records.records
    assert wing.allocations.published == 0
    assert bool(wing.driver.launched) == launches
    for vm in wing.driver.launched:
        assert vm.stopping and "shutdown" in vm.methods_called

    # Nothing holds the id either: the same create succeeds once the fault is gone.
    heal()
    sandbox = await wing.service.creates.create(spec)
    assert wing.records.states(sandbox_id) == [RUNNING]
    assert wing.network.live == [sandbox.slot]


# --- refusals ------------------------------------------------------------------------------------

@pytest.mark.parametrize("token", [pytest.param("another", id="other-token"),
                                   pytest.param("", id="no-token")])
async def test_a_taken_id_is_refused_and_its_sandbox_left_alone(wing: Wing, token: str) -> None:
    spec = wing.spec()
    sandbox = await wing.service.creates.create(spec)
    with pytest.raises(Conflict):  # not the same create sent again (no token: unknown)
        await wing.service.creates.create(
            wing.spec(sandbox_id=spec.sandbox_id, envd_access_token=token))
    assert wing.service.registry.get(spec.sandbox_id) is sandbox
    assert len(wing.driver.launched) == 1
    assert wing.network.live == [sandbox.slot]
    assert wing.directory(spec.sandbox_id).is_dir()


async def test_an_id_being_created_is_refused_to_a_second_create(wing: Wing) -> None:
    spec = wing.spec()
    creates = wing.service.creates
    outcomes = await asyncio.gather(creates.create(spec), creates.create(spec),
                                    return_exceptions=True)
    assert sorted(type(o).__name__ for o in outcomes) == ["Conflict", "Sandbox"]
    assert len(wing.service.registry.all()) == 1
    assert len(wing.network.live) == 1


async def test_a_create_sent_again_gets_the_sandbox_it_made(wing: Wing) -> None:
    # The gateway sends a create again, same id and token, when its answer was lost.
    spec = wing.spec()
    made = await wing.service.creates.create(spec)
    assert await wing.service.creates.create(spec) is made
    assert len(wing.driver.launched) == 1 and len(wing.network.live) == 1
    assert wing.records.states(spec.sandbox_id) == [RUNNING]


async def test_the_id_of_a_paused_sandbox_is_taken(wing: Wing) -> None:
    spec = wing.spec()
    await wing.service.creates.create(spec)
    await wing.service.pauses.pause(spec.sandbox_id, cluster_pb2.PAUSE_MODE_FILESYSTEM)
    with pytest.raises(Conflict):
        await wing.service.creates.create(spec)
    assert wing.service.registry.paused_ids() == [spec.sandbox_id]
    assert wing.records.records[spec.sandbox_id].state == PAUSED


@pytest.mark.parametrize("fields", [
    pytest.param({"sandbox_id": "Not-Valid"}, id="bad-id"),
    pytest.param({"sandbox_id": ""}, id="no-id"),
    pytest.param({"template_id": ""}, id="no-template"),
    pytest.param({"timeout_seconds": MAX_TIMEOUT_S + 1}, id="timeout"),
    pytest.param({"resources": cluster_pb2.Resources(vcpus=4)}, id="other-vcpus"),
    pytest.param({"resources": cluster_pb2.Resources(memory_mib=512)}, id="other-memory"),
])
async def test_a_bad_spec_is_refused_before_any_work(
    wing: Wing, fields: dict[str, object]
) -> None:
    spec = wing.spec(**fields)
    with pytest.raises(InvalidArgument):
        await wing.service.creates.create(spec)
    assert wing.network.created == []
    assert wing.driver.launched == []
    assert list((wing.state_dir / "sandboxes").glob("*")) == []
    assert wing.records.records == {}


async def test_an_unknown_template_is_not_found_before_any_work(wing: Wing) -> None:
    with pytest.raises(NotFound):
        await wing.create(template_id="nosuch")
    assert wing.network.created == []
    assert wing.driver.launched == []


async def test_a_busy_sandbox_refuses_other_operations(wing: Wing) -> None:
    spec = wing.spec()
    await wing.service.creates.create(spec)
    sandbox_id = spec.sandbox_id
    gate = wing.envd.hold("sync")  # the pause holds the sandbox while /sync hangs
    pausing = asyncio.ensure_future(
        wing.service.pauses.pause(sandbox_id, cluster_pb2.PAUSE_MODE_FILESYSTEM))
    await wing.envd.held("sync")

    assert wing.service.registry.is_busy(sandbox_id)
    assert sandbox_id not in wing.service.guest_metrics.sampling_targets()
    for operation in (
        wing.service.kills.kill(sandbox_id),
        wing.service.pauses.pause(sandbox_id),
        wing.service.snapshots.create(sandbox_id, filesystem_only=True),
        wing.service.creates.create(spec),
        wing.service.forks.fork(sandbox_id, 1),
    ):
        with pytest.raises(Conflict):
            await operation
    # A refused operation was never queued: the sandbox is as the pause leaves it.
    gate.set()
    record = await pausing
    assert record.state == PAUSED
    assert wing.service.registry.paused_ids() == [sandbox_id]
    assert not wing.service.registry.is_busy(sandbox_id)


async def test_the_node_record_is_written_after_the_answer_once_per_burst(wing: Wing) -> None:
    gate = wing.allocations.hold()
    first = await asyncio.wait_for(wing.create(), 10)  # its node record waits at the gate
    assert wing.records.states(first.sandbox_id) == [RUNNING]  # known cluster-wide already
    await asyncio.wait_for(asyncio.gather(*(wing.create() for _ in range(5))), 10)
    assert wing.allocations.published == 0
    gate.set()
    # The write in flight, then one carrying the five that ended during it.
    await wing.allocations.reached(2)
    await asyncio.sleep(0.05)  # (no third write comes)
    assert wing.allocations.published == 2
