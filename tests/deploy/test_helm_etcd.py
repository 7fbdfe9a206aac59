"""The chart's etcd: 3 members by default (a StatefulSet under a headless Service, started in
parallel, each finding its peers by their stable names), a disruption budget that keeps the
quorum, and every service pointed at the Service name, which resolves to every member.
(Killing a member of a real 3-member cluster under the services: common/tests/
test_cluster_failover.py and tests/e2e/test_faults_etcd_member.py.)"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from .test_helm_chart import CHART, K8S_VERSION, by_kind_name, containers, helm, render

FULL = "t-aenv"
ETCD = f"{FULL}-etcd"


def _flags(command: list[str]) -> dict[str, str]:
    return dict(arg.removeprefix("--").split("=", 1) for arg in command if "=" in arg)


def _etcd(docs: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    return docs[("StatefulSet", ETCD)]


def test_three_members_find_each_other_by_their_stable_names() -> None:
    docs = by_kind_name(render([]))
    statefulset = _etcd(docs)
    assert statefulset["spec"]["replicas"] == 3
    assert statefulset["spec"]["podManagementPolicy"] == "Parallel"  # else no quorum, ever
    service = docs[("Service", ETCD)]
    assert statefulset["spec"]["serviceName"] == ETCD
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"]

    flags = _flags(containers(statefulset)[0]["command"])
    members = dict(member.split("=") for member in flags["initial-cluster"].split(","))
    # Each member's name and peer URL are what the member itself announces (its pod name).
    assert members == {f"{ETCD}-{i}": f"http://{ETCD}-{i}.{ETCD}:2380" for i in range(3)}
    assert flags["name"] == "$(POD_NAME)"
    assert flags["initial-advertise-peer-urls"] == f"http://$(POD_NAME).{ETCD}:2380"
    assert flags["initial-cluster-state"] == "new"
    assert flags["initial-cluster-token"] == ETCD


def test_one_member_down_at_a_time_and_spread_over_nodes() -> None:
    docs = by_kind_name(render([]))
    statefulset = _etcd(docs)
    pod_labels = statefulset["spec"]["template"]["metadata"]["labels"]
    budget = docs[("PodDisruptionBudget", ETCD)]
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (term,) = statefulset["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    kubernetes_validate.validate(budget, K8S_VERSION, strict=True)


def test_services_reach_every_member_through_one_name() -> None:
    docs = by_kind_name(render([]))
    config = next(doc for (kind, _), doc in docs.items() if kind == "ConfigMap")
    # The headless Service: its DNS name resolves to every member, and gRPC re-resolves it.
    assert config["data"]["AENV_ETCD_ENDPOINTS"] == f"{ETCD}:2379"


def test_a_single_member_has_no_budget() -> None:
    docs = by_kind_name(render(["--set", "etcd.replicas=1"]))
    flags = _flags(containers(_etcd(docs))[0]["command"])
    assert flags["initial-cluster"] == f"{ETCD}-0=http://{ETCD}-0.{ETCD}:2380"
    assert ("PodDisruptionBudget", ETCD) not in docs


@pytest.mark.parametrize("replicas", ["2", "4"])
def test_an_even_member_count_is_refused(replicas: str) -> None:
    result = helm("template", "t", str(CHART), "--set", f"etcd.replicas={replicas}")
    assert result.returncode != 0 and "etcd.replicas must be 1, 3 or 5" in result.stderr


def test_external_etcd_runs_no_members() -> None:
    docs = by_kind_name(render(["--set", "etcd.enabled=false",
                                "--set", "etcd.external.endpoints=etcd-a:2379"]))
    assert not [key for key in docs if key[1] == ETCD]
