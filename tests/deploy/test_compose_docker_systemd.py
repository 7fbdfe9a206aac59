"""Static checks of the non-Kubernetes deployments, in seconds and without a Docker engine or a
systemd boot: compose parses and runs only modules that exist, the Dockerfile copies what exists,
the systemd install script installs the units into a DESTDIR. They run for real in
test_docker_platform.py, test_compose_platform.py and test_systemd_nspawn.py."""

from __future__ import annotations

import configparser
import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import yaml

from aenv_cli.ports import PlatformPorts
from aenv_cli.services import service_environment

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def module_exists(module: str) -> bool:
    """`python -m module` finds a package with __main__ or a module file in this repository."""
    top, _, rest = module.partition(".")
    for root in [REPO / "cli", *(REPO / "services").iterdir()]:
        base = root / top
        if not rest and (base / "__main__.py").is_file():
            return True
        if rest and (base / (rest.replace(".", "/") + ".py")).is_file():
            return True
    return False


def python_modules(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "-m"]


def test_compose_file_parses_and_references_only_existing_modules() -> None:
    compose: dict[str, Any] = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    services = compose["services"]
    nodes = {"nodeagent-a", "nodeagent-b"}
    assert set(services) == {"etcd", "scheduler", "snapstore", "gateway"} | nodes
    modules = []
    for svc in services.values():
        modules += python_modules(list(svc["command"]))
        modules += python_modules(list(svc.get("healthcheck", {}).get("test", [])))
    assert {f"aenv_{s}" for s in ("scheduler", "snapstore", "nodeagent", "gateway")} <= set(modules)
    assert [m for m in modules if not module_exists(m)] == []
    for name, svc in services.items():
        for dep in svc.get("depends_on", {}):
            assert dep in services, f"{name} depends on unknown {dep}"
    for node in nodes:
        agent = services[node]
        assert "/dev/kvm:/dev/kvm" in agent["devices"] and "ALL" in agent["cap_add"]
        assert agent["environment"]["AENV_NODEAGENT_NODE_ID"] == node
        assert f"{node}:/var/lib/aenv" in agent["volumes"]
    # nodeagent-b only with the `two-nodes` profile; the host cache's override names both.
    assert services["nodeagent-b"]["profiles"] == ["two-nodes"]
    assert "profiles" not in services["nodeagent-a"]
    host_cache = yaml.safe_load((DEPLOY / "compose" / "compose.host-cache.yaml").read_text())
    assert set(host_cache["services"]) == nodes


def test_compose_and_systemd_set_every_variable_the_launcher_sets() -> None:
    wiring = set(service_environment(Path("/x"), PlatformPorts(), {})) - {"PYTHONUNBUFFERED"}
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    assert wiring <= set(compose["services"]["gateway"]["environment"])
    env_file = (DEPLOY / "systemd" / "aenv.env").read_text()
    assert wiring <= set(re.findall(r"^(AENV_\w+)=", env_file, re.MULTILINE))


def test_dockerfile_copies_existing_paths_and_installs_every_package() -> None:
    text = (DEPLOY / "docker" / "Dockerfile").read_text()
    # Debian's image by default; build.sh passes a base made locally (no Docker Hub needed).
    assert re.search(r"^ARG BASE_IMAGE=debian:bookworm", text, re.MULTILINE)
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", text, re.MULTILINE)
    for source in re.findall(r"^COPY (\S+) ", text, re.MULTILINE):
        assert (REPO / source).exists(), source
    installed = set(re.findall(r"\./((?:services/)?[\w/]+)", text))
    for pyproject in [*REPO.glob("services/*/pyproject.toml"), REPO / "cli" / "pyproject.toml"]:
        assert str(pyproject.parent.relative_to(REPO)) in installed
    assert {"gen/python", "common"} <= installed


def test_systemd_install_into_destdir_keeps_edited_settings(tmp_path: Path) -> None:
    script = DEPLOY / "systemd" / "install.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    env = {**os.environ, "DESTDIR": str(tmp_path)}
    subprocess.run([str(script), "--no-venv"], env=env, check=True, timeout=60)
    units = tmp_path / "etc" / "systemd" / "system"
    names = sorted(p.name for p in units.iterdir())
    assert names == [
        "aenv-etcd.service", "aenv-gateway.service", "aenv-nodeagent.service",
        "aenv-scheduler.service", "aenv-snapstore.service", "aenv.target",
    ]
    settings = tmp_path / "etc" / "aenv" / "aenv.env"
    assert stat.S_IMODE(settings.stat().st_mode) == 0o640
    settings.write_text("AENV_LOG_LEVEL=DEBUG\n")
    subprocess.run([str(script), "--no-venv"], env=env, check=True, timeout=60)
    assert settings.read_text() == "AENV_LOG_LEVEL=DEBUG\n"
    for unit in units.glob("aenv-*.service"):
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        parser.read(unit)
        assert parser["Service"]["EnvironmentFile"] == "/etc/aenv/aenv.env"
        for module in python_modules(parser["Service"]["ExecStart"].split()):
            assert module_exists(module), module
