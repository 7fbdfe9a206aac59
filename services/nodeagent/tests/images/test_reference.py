"""Image references parsed as `docker pull` parses them, and endpoints as containerd picks them."""

from __future__ import annotations

import pytest

from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.images.errors import BadReference
from aenv_nodeagent.images.reference import RegistryHosts, is_loopback, parse_reference

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(("text", "registry", "repository", "tag", "digest"), [
    ("busybox", "docker.io", "library/busybox", "latest", None),
    ("busybox:1.36", "docker.io", "library/busybox", "1.36", None),
    ("user/app", "docker.io", "user/app", "latest", None),
    ("docker.io/busybox", "docker.io", "library/busybox", "latest", None),
    ("index.docker.io/library/busybox:1", "docker.io", "library/busybox", "1", None),
    ("localhost/app", "localhost", "app", "latest", None),
    ("localhost:5000/a/b:tag", "localhost:5000", "a/b", "tag", None),
    ("host:5000/a/b:tag", "host:5000", "a/b", "tag", None),
    ("ghcr.io/o/app@" + DIGEST, "ghcr.io", "o/app", None, DIGEST),
    ("ghcr.io/o/app:v1@" + DIGEST, "ghcr.io", "o/app", "v1", DIGEST),
    ("127.0.0.1:5000/x", "127.0.0.1:5000", "x", "latest", None),
    ("[::1]:5000/x:y", "[::1]:5000", "x", "y", None),
    ("Host/app", "Host", "app", "latest", None),  # uppercase: a host, as Docker reads it
    ("a/b/c/d__e.f-g:T_1.x", "docker.io", "a/b/c/d__e.f-g", "T_1.x", None),
])
def test_references_normalise_as_docker_does(
    text: str, registry: str, repository: str, tag: str | None, digest: str | None
) -> None:
    ref = parse_reference(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag,
                                                                   digest)
    assert ref.reference == (digest or tag)


def test_str_is_the_full_name() -> None:
    assert str(parse_reference("busybox")) == "docker.io/library/busybox:latest"


@pytest.mark.parametrize("text", [
    "", " busybox", "Busybox", "busybox:", "busybox:-x", "a//b", "busybox@sha256:abc",
    "busybox@md5:" + "0" * 32, "-a/b", "a/B", "host:port/x", "x" * 300,
])
def test_bad_references_are_refused(text: str) -> None:
    with pytest.raises(BadReference):
        parse_reference(text)


def test_loopback_hosts() -> None:
    for host in ("localhost", "localhost:5000", "127.0.0.1", "127.1.2.3:80", "[::1]:5000",
                 "::1", "reg.localhost"):
        assert is_loopback(host), host
    for host in ("docker.io", "10.0.0.1:5000", "[fe80::1]:5000", "localhostx"):
        assert not is_loopback(host), host


def test_upstream_only_by_default_https_unless_loopback() -> None:
    hosts = RegistryHosts()
    [hub] = hosts.endpoints("docker.io")
    assert (hub.base_url, hub.mirror) == ("https://registry-1.docker.io/v2", False)
    assert hosts.endpoints("ghcr.io")[0].base_url == "https://ghcr.io/v2"
    assert hosts.endpoints("127.0.0.1:5000")[0].base_url == "http://127.0.0.1:5000/v2"
    assert hosts.endpoints("localhost:5000")[0].host == "localhost:5000"


def test_mirrors_in_order_then_upstream() -> None:
    hosts = RegistryHosts(
        mirrors={"docker.io": ["mirror-a.internal:5000", "https://mirror-b.internal/prefix",
                               "http://10.1.2.3:5000/v2"]},
        insecure=["mirror-a.internal"],
    )
    urls = [(e.base_url, e.mirror) for e in hosts.endpoints("docker.io")]
    assert urls == [
        ("http://mirror-a.internal:5000/v2", True),
        ("https://mirror-b.internal/prefix/v2", True),
        ("http://10.1.2.3:5000/v2", True),
        ("https://registry-1.docker.io/v2", False),
    ]
    assert [e.base_url for e in hosts.endpoints("quay.io")] == ["https://quay.io/v2"]


def test_mirror_only_and_default_hosts() -> None:
    hosts = RegistryHosts(mirrors={"docker.io": ["m.internal"], "_default": ["d.internal"]},
                          mirror_only=["docker.io"])
    assert [e.base_url for e in hosts.endpoints("docker.io")] == ["https://m.internal/v2"]
    assert [e.base_url for e in hosts.endpoints("ghcr.io")] == [
        "https://d.internal/v2", "https://ghcr.io/v2"]


def test_insecure_by_host_port_and_cidr() -> None:
    hosts = RegistryHosts(insecure=["reg.internal:5000", "other.internal", "10.0.0.0/8"])
    assert hosts.is_insecure("reg.internal:5000")
    assert not hosts.is_insecure("reg.internal:6000")
    assert hosts.is_insecure("other.internal:1234")
    assert hosts.is_insecure("10.2.3.4:5000")
    assert not hosts.is_insecure("11.0.0.1")


def test_bad_endpoint_is_refused() -> None:
    with pytest.raises(BadReference):
        RegistryHosts(mirrors={"docker.io": ["ftp://x"]}).endpoints("docker.io")


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AENV_NODEAGENT_REGISTRY_MIRRORS",
                       '{"docker.io": ["mirror.internal:5000", "https://m2.internal"]}')
    monkeypatch.setenv("AENV_NODEAGENT_REGISTRY_MIRROR_ONLY", '["docker.io"]')
    monkeypatch.setenv("AENV_NODEAGENT_INSECURE_REGISTRIES", '["mirror.internal:5000"]')
    settings = NodeAgentSettings()
    hosts = RegistryHosts(settings.registry_mirrors, settings.insecure_registries,
                          settings.registry_mirror_only)
    assert [e.base_url for e in hosts.endpoints("docker.io")] == [
        "http://mirror.internal:5000/v2", "https://m2.internal/v2"]
    assert settings.resolved_image_cache_dir() == settings.resolved_cache_dir() / "images"
    assert settings.registry_credentials_file is None
