"""The Helm chart: `helm lint`, and `helm template` renders validated offline against the
Kubernetes 1.34 schemas (kubernetes-validate, strict), for the main value combinations."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "aenv"
HELM = REPO / "scripts" / "helm.sh"
K8S_VERSION = "1.34.0"
SERVICES = ("gateway", "scheduler", "snapstore", "nodeagent")

VALUE_SETS: dict[str, list[str]] = {
    "defaults": [],
    "external-etcd-s3-credentials": [
        "--set", "etcd.enabled=false",
        "--set", "etcd.external.endpoints=etcd-a:2379\\,etcd-b:2379",
        "--set", "snapstore.s3.accessKeyId=AKIAEXAMPLE",
        "--set", "snapstore.s3.secretAccessKey=example-secret",
        "--set", "snapstore.s3.endpointUrl=http://minio:9000",
        "--set", "gateway.apiKey.value=e2b_0123456789abcdef0123456789abcdef01234567",
        "--set", "gateway.domain=sandbox.example.com",
        "--set", "gateway.tls.secretName=sandbox-example-com-tls",
    ],
    "fs-backend-existing-secrets": [
        "--set", "snapstore.backend=fs",
        "--set", "snapstore.fs.existingClaim=aenv-snapshots",
        "--set", "gateway.apiKey.existingSecret=my-key",
        "--set", "nodeagent.pvmGuestKernel=/var/lib/aenv/pvm/vmlinux",
    ],
}


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HELM), *args], capture_output=True, text=True, timeout=120, check=False
    )


def render(flags: list[str]) -> list[dict[str, Any]]:
    result = helm("template", "t", str(CHART), "--namespace", "aenv", *flags)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind_name(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = doc["spec"]["template"]["spec"]["containers"]
    return result


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_helm_lint_passes() -> None:
    result = helm("lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_render_is_valid_kubernetes(name: str) -> None:
    docs = render(VALUE_SETS[name])
    assert len(docs) >= 9
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_default_render_has_every_component_wired() -> None:
    docs = by_kind_name(render([]))
    gateway_svc = docs[("Service", "t-aenv-gateway")]
    assert {p["port"] for p in gateway_svc["spec"]["ports"]} == {3000, 50050}
    assert docs[("StatefulSet", "t-aenv-scheduler")]["spec"]["replicas"] == 2
    assert ("StatefulSet", "t-aenv-etcd") in docs and ("Service", "t-aenv-snapstore") in docs
    config = docs[("ConfigMap", "t-aenv-config")]["data"]
    assert config["AENV_ETCD_ENDPOINTS"] == "t-aenv-etcd:2379"
    # Every replica by its stable name: a Service address would pin the gateway to one pod.
    assert config["AENV_GATEWAY_SCHEDULER_ADDRESS"] == (
        "t-aenv-scheduler-0.t-aenv-scheduler:50051,t-aenv-scheduler-1.t-aenv-scheduler:50051"
    )
    assert docs[("Service", "t-aenv-scheduler")]["spec"]["clusterIP"] == "None"
    assert config["AENV_NODEAGENT_SNAPSTORE_ADDRESS"] == "t-aenv-snapstore:50053"
    key = docs[("Secret", "t-aenv-api-key")]["data"]["api-key"]
    import base64

    assert base64.b64decode(key).decode().startswith("e2b_")


def test_every_service_runs_its_module_from_the_one_image() -> None:
    docs = render([])
    commands = {}
    for doc in docs:
        if doc["kind"] in ("Deployment", "DaemonSet", "StatefulSet"):
            for container in containers(doc):
                assert container["image"] == "aenv:0.1.0"
                commands[container["name"]] = container["command"]
    for svc in SERVICES:
        assert commands[svc] == ["python", "-m", f"aenv_{svc}"]
        assert (REPO / "services" / svc / f"aenv_{svc}" / "__main__.py").is_file()
    assert commands["etcd"][0] == "/usr/bin/etcd"


def test_nodeagent_daemonset_gets_kvm_tun_and_capabilities() -> None:
    docs = by_kind_name(render([]))
    pod = docs[("DaemonSet", "t-aenv-nodeagent")]["spec"]["template"]["spec"]
    assert pod["hostPID"] is False and pod["hostNetwork"] is False
    (agent,) = pod["containers"]
    security = agent["securityContext"]
    assert security["privileged"] is True
    assert set(security["capabilities"]["add"]) == {"NET_ADMIN", "SYS_ADMIN"}
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert {"/dev/kvm", "/dev/net/tun", "/var/lib/aenv"} <= host_paths
    env = env_of(agent)
    assert env["AENV_NODEAGENT_ADVERTISE_ADDRESS"] == "$(POD_IP):50052"
    assert env["AENV_NODEAGENT_NODE_ID"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_snapstore_s3_credentials_come_from_a_secret() -> None:
    docs = by_kind_name(render(VALUE_SETS["external-etcd-s3-credentials"]))
    assert ("StatefulSet", "t-aenv-etcd") not in docs
    config = docs[("ConfigMap", "t-aenv-config")]["data"]
    assert config["AENV_ETCD_ENDPOINTS"] == "etcd-a:2379,etcd-b:2379"
    (snapstore,) = containers(docs[("Deployment", "t-aenv-snapstore")])
    env = env_of(snapstore)
    assert env["AENV_SNAPSTORE_S3_ENDPOINT_URL"] == "http://minio:9000"
    secret_ref = env["AENV_SNAPSTORE_S3_SECRET_ACCESS_KEY"]["secretKeyRef"]
    assert secret_ref == {"name": "t-aenv-snapstore-s3", "key": "secret-access-key"}
    assert ("Secret", "t-aenv-snapstore-s3") in docs


def test_missing_required_values_fail_the_render() -> None:
    no_etcd = helm("template", "t", str(CHART), "--set", "etcd.enabled=false")
    assert no_etcd.returncode != 0 and "etcd.external.endpoints is required" in no_etcd.stderr
    fs = helm("template", "t", str(CHART), "--set", "snapstore.backend=fs")
    assert fs.returncode != 0 and "snapstore.fs.existingClaim is required" in fs.stderr


def test_the_gateway_serves_https_for_its_domain_from_a_tls_secret() -> None:
    docs = by_kind_name(render(VALUE_SETS["external-etcd-s3-credentials"]))
    deployment = docs[("Deployment", "t-aenv-gateway")]
    (gateway,) = containers(deployment)
    env = env_of(gateway)
    assert env["AENV_GATEWAY_DOMAIN"] == "sandbox.example.com"
    assert env["AENV_GATEWAY_TLS_LISTEN"] == "0.0.0.0:8443"
    mounts = {m["name"]: m["mountPath"] for m in gateway["volumeMounts"]}
    assert env["AENV_GATEWAY_TLS_CERT_FILE"] == f"{mounts['tls']}/tls.crt"
    assert env["AENV_GATEWAY_TLS_KEY_FILE"] == f"{mounts['tls']}/tls.key"
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "sandbox-example-com-tls"
    ports = {p["name"]: p for p in docs[("Service", "t-aenv-gateway")]["spec"]["ports"]}
    assert ports["https"]["port"] == 443 and ports["https"]["targetPort"] == "https"
    # Without a secret there is no HTTPS edge; a secret without a domain is refused.
    (plain,) = containers(by_kind_name(render([]))[("Deployment", "t-aenv-gateway")])
    assert "AENV_GATEWAY_TLS_LISTEN" not in env_of(plain)
    refused = helm("template", "t", str(CHART), "--set", "gateway.tls.secretName=x")
    assert refused.returncode != 0
    assert "gateway.tls.secretName needs gateway.domain" in refused.stderr


def test_node_capacity_comes_from_the_host_unless_set() -> None:
    def capacity_env(flags: list[str]) -> dict[str, Any]:
        [agent] = [d for d in render(flags) if d["kind"] == "DaemonSet"]
        env = env_of(containers(agent)[0])
        return {k: v for k, v in env.items() if k.startswith("AENV_NODEAGENT_CAPACITY_")}

    assert capacity_env([]) == {}
    assert capacity_env(["--set", "nodeagent.capacity.vcpus=48"]) == {
        "AENV_NODEAGENT_CAPACITY_VCPUS": "48"
    }


def test_scheduler_replicas_are_each_named_to_the_gateway() -> None:
    docs = by_kind_name(render(["--set", "scheduler.replicas=3"]))
    addresses = docs[("ConfigMap", "t-aenv-config")]["data"]["AENV_GATEWAY_SCHEDULER_ADDRESS"]
    assert addresses.split(",") == [
        f"t-aenv-scheduler-{i}.t-aenv-scheduler:50051" for i in range(3)
    ]
    assert docs[("StatefulSet", "t-aenv-scheduler")]["spec"]["serviceName"] == "t-aenv-scheduler"
