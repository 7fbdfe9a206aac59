"""What the wing answers about its sandboxes, and the small updates of running ones: records,
allocation, timeout, egress policy and guest metrics."""

from __future__ import annotations

import time

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import InvalidArgument, NotFound, Unavailable
from aenv_common.limits import MAX_TIMEOUT_S

from .conftest import FILESYSTEM, PAUSED, RUNNING, Wing


async def test_records_list_running_and_paused_sandboxes_once(wing: Wing) -> None:
    running, paused = await wing.create(), await wing.create()
    await wing.service.pauses.pause(paused.sandbox_id, FILESYSTEM)
    states = {record.sandbox_id: record.state for record in wing.service.registry.records()}
    assert states == {running.sandbox_id: RUNNING, paused.sandbox_id: PAUSED}
    assert wing.service.guest_metrics.sampling_targets() == [running.sandbox_id]
    assert wing.service.registry.allocated() == running.record.resources


async def test_a_timeout_out_of_range_is_refused(wing: Wing) -> None:
    sandbox = await wing.create()
    before = sandbox.record.end_at
    with pytest.raises(InvalidArgument):
        await wing.service.changes.set_timeout(sandbox.sandbox_id, MAX_TIMEOUT_S + 1)
    assert wing.records.records[sandbox.sandbox_id].end_at == before
    with pytest.raises(NotFound):
        await wing.service.changes.set_timeout("nosuch", 60)


async def test_a_new_egress_policy_keeps_how_ports_are_reached(wing: Wing) -> None:
    sandbox = await wing.create(network=cluster_pb2.NetworkPolicy(
        private_traffic=True, mask_request_host="app:${PORT}", https_ports=[8443]))
    record = await wing.service.changes.update_network(
        sandbox.sandbox_id,
        cluster_pb2.NetworkPolicy(allow_internet_access=False, deny_out=["10.9.0.0/16"]))

    policy = wing.network.policies[sandbox.slot.netns]
    assert policy.network.deny_out == ["10.9.0.0/16"]
    assert policy.rules.denies_unlisted
    assert record.network.private_traffic and record.network.mask_request_host == "app:${PORT}"
    assert list(record.network.https_ports) == [8443]
    assert wing.records.records[sandbox.sandbox_id].network == record.network


async def test_metrics_sample_a_fresh_sandbox_and_keep_a_paused_ones(wing: Wing) -> None:
    sandbox = await wing.create()
    [sample] = await wing.service.guest_metrics.metrics(sandbox.sandbox_id)
    assert (sample.mem_total, sample.cpu_count) == (128 << 20, 1)
    assert sample.ts <= time.time()
    metrics = [call for call in wing.envd.calls if call.method == "metrics"]
    assert [(c.host, c.access_token) for c in metrics] == [
        (sandbox.host, sandbox.record.envd_access_token)]

    await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    assert await wing.service.guest_metrics.metrics(sandbox.sandbox_id) == [sample]  # no new sample
    assert await wing.service.guest_metrics.latest(sandbox.sandbox_id) == sample
    await wing.service.kills.kill(sandbox.sandbox_id)
    assert await wing.service.guest_metrics.latest(sandbox.sandbox_id) is None


async def test_a_guest_that_does_not_answer_has_no_metric(wing: Wing) -> None:
    sandbox = await wing.create()
    wing.envd.fail_on["metrics"] = TimeoutError()
    with pytest.raises(Unavailable):
        await wing.service.guest_metrics.sample(sandbox.sandbox_id)
    assert await wing.service.guest_metrics.latest(sandbox.sandbox_id) is None
