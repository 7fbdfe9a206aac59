"""The platform secrets key reaches every gateway and node agent of each deployment: one
Kubernetes Secret mounted into both (kept across upgrades), one compose volume both share, one
file named in the systemd settings."""

from __future__ import annotations

import base64
import re
from typing import Any

import yaml

from .test_helm_chart import CHART, REPO, by_kind_name, containers, env_of, helm, render

DEPLOY_DIR = REPO / "deploy"
KEY_FILE = "/etc/aenv/secrets-key/secrets.key"


def _mounts_key(pod: dict[str, Any], secret_name: str) -> None:
    (container,) = pod["containers"]
    assert env_of(container)["AENV_SECRETS_KEY_FILE"] == KEY_FILE
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["secrets-key"] == {"name": "secrets-key", "mountPath": "/etc/aenv/secrets-key",
                                     "readOnly": True}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["secrets-key"]["secret"] == {"secretName": secret_name, "defaultMode": 0o400}


def test_helm_makes_a_32_byte_key_and_mounts_it_into_gateways_and_node_agents() -> None:
    docs = by_kind_name(render([]))
    material = base64.b64decode(docs[("Secret", "t-aenv-secrets-key")]["data"]["secrets.key"])
    assert len(material) == 32
    for kind, name in (("Deployment", "t-aenv-gateway"), ("DaemonSet", "t-aenv-nodeagent")):
        _mounts_key(docs[(kind, name)]["spec"]["template"]["spec"], "t-aenv-secrets-key")
    for doc in docs.values():
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] != "t-aenv-gateway":
            assert "AENV_SECRETS_KEY_FILE" not in env_of(containers(doc)[0])


def test_helm_takes_an_existing_secret_instead() -> None:
    docs = by_kind_name(render(["--set", "secretsKey.existingSecret=my-secrets-key"]))
    assert ("Secret", "t-aenv-secrets-key") not in docs
    _mounts_key(docs[("DaemonSet", "t-aenv-nodeagent")]["spec"]["template"]["spec"],
                "my-secrets-key")
    assert helm("lint", "--strict", str(CHART), "--set",
                "secretsKey.existingSecret=k").returncode == 0


def test_compose_shares_one_key_volume_and_systemd_names_one_file() -> None:
    compose = yaml.safe_load((DEPLOY_DIR / "compose" / "compose.yaml").read_text())
    for name in ("gateway", "nodeagent-a", "nodeagent-b"):
        service = compose["services"][name]
        assert service["environment"]["AENV_SECRETS_KEY_FILE"] == KEY_FILE
        assert "secrets-key:/etc/aenv/secrets-key" in service["volumes"]
    assert "secrets-key" in compose["volumes"]
    env_file = (DEPLOY_DIR / "systemd" / "aenv.env").read_text()
    assert re.search(r"^AENV_SECRETS_KEY_FILE=/var/lib/aenv/secrets.key$", env_file, re.M)
