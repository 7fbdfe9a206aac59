"""Image references and where to fetch them from: pure parsing, no I/O.

A reference names an image the way `docker pull` takes it and is normalised the same way:

    busybox                       -> docker.io/library/busybox:latest
    user/app:1.2                  -> docker.io/user/app:1.2
    localhost:5000/app            -> localhost:5000/app:latest
    ghcr.io/o/app@sha256:<hex>    -> pinned by digest (a digest wins over a tag)

The first path component is a registry host only if it looks like one (has a `.` or a `:`, or is
`localhost`); otherwise the image is on Docker Hub, whose one-component names live under
`library/`.

`RegistryHosts` then says which endpoints serve a registry, in the order containerd's
`hosts.toml` gives them: each configured mirror in turn, then the registry itself (the
*upstream*) unless the registry is configured mirror-only. A registry is spoken to over plain HTTP
when it is configured insecure or, as Docker does, when it is on loopback; otherwise HTTPS.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .errors import BadReference

DOCKER_HUB = "docker.io"
# Docker Hub's name and the host that actually serves its v2 API.
_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
_HUB_API_HOST = "registry-1.docker.io"
# A configuration key that applies to every registry without its own entry (containerd's name).
DEFAULT_HOSTS_KEY = "_default"

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY_RE = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG_RE = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_LABEL = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST_RE = re.compile(rf"^(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?$")
_NAME_MAX = 255


@dataclass(frozen=True)
class ImageReference:
    registry: str  # host[:port], Docker Hub as "docker.io"
    repository: str  # "library/busybox"
    tag: str | None = None
    digest: str | None = None  # "sha256:<hex>"

    @property
    def reference(self) -> str:
        """What to ask the registry's manifest endpoint for: the digest if pinned, else the tag."""
        return self.digest or self.tag or "latest"

    def __str__(self) -> str:
        text = f"{self.registry}/{self.repository}"
        if self.tag:
            text += f":{self.tag}"
        return text + (f"@{self.digest}" if self.digest else "")


def parse_reference(text: str) -> ImageReference:
    """Parse and normalise an image reference as `docker pull` does; BadReference if invalid."""
    if not text or text != text.strip():
        raise BadReference(text, "empty or surrounded by spaces")
    remainder, digest = text, None
    if "@" in remainder:
        remainder, digest = remainder.split("@", 1)
        if not _DIGEST_RE.match(digest):
            raise BadReference(text, "a digest must be sha256: and 64 lowercase hex digits")
    registry, path = _split_registry(remainder)
    tag = None
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, tag = path.rsplit(":", 1)
        if not _TAG_RE.match(tag):
            raise BadReference(text, f"bad tag {tag!r}")
    if not _HOST_RE.match(registry):
        raise BadReference(text, f"bad registry host {registry!r}")
    if registry in _HUB_ALIASES:
        registry = DOCKER_HUB
        if "/" not in path:
            path = f"library/{path}"
    if path != path.lower():
        raise BadReference(text, "repository names must be lowercase")
    if not _REPOSITORY_RE.match(path) or len(f"{registry}/{path}") > _NAME_MAX:
        raise BadReference(text, f"bad repository name {path!r}")
    if tag is None and digest is None:
        tag = "latest"
    return ImageReference(registry, path, tag, digest)


def _split_registry(name: str) -> tuple[str, str]:
    # Docker's rule: the first component is a host if it has a `.` or `:`, is `localhost`, or
    # has uppercase letters (which a repository may not).
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        return first, rest
    return DOCKER_HUB, name


# ---- endpoints -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """One place that serves a registry's v2 API."""

    base_url: str  # ".../v2", no trailing slash
    host: str  # host[:port] of base_url: the key for credentials and tokens
    mirror: bool  # mirrors get `?ns=<registry>` so one mirror can serve several registries


def host_name(host: str) -> str:
    """`host[:port]` without its port (and without IPv6 brackets)."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def is_loopback(host: str) -> bool:
    """Docker speaks plain HTTP to these without being told: localhost, 127.0.0.0/8, ::1."""
    name = host_name(host).lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class RegistryHosts:
    """Mirrors and transport per registry, as containerd's hosts.toml and Docker's
    `insecure-registries` express them.

    `mirrors` maps a registry (`docker.io`, `ghcr.io`, `host:5000`, or `_default`) to endpoints
    tried in order: `host[:port][/path]` or a URL with its scheme. `mirror_only` lists registries
    whose upstream is never tried after their mirrors. `insecure` lists `host[:port]` names (a bare
    host matches any port) or CIDRs spoken to over plain HTTP."""

    mirrors: Mapping[str, Sequence[str]] = field(default_factory=dict)
    insecure: Collection[str] = ()
    mirror_only: Collection[str] = ()

    def endpoints(self, registry: str) -> list[Endpoint]:
        configured = self.mirrors.get(registry)
        if configured is None:
            configured = self.mirrors.get(DEFAULT_HOSTS_KEY, ())
        found = [self._endpoint(entry, mirror=True) for entry in configured]
        if registry not in self.mirror_only or not found:
            upstream = _HUB_API_HOST if registry == DOCKER_HUB else registry
            found.append(self._endpoint(upstream, mirror=False))
        return found

    def is_insecure(self, host: str) -> bool:
        if is_loopback(host):
            return True
        name = host_name(host)
        for entry in self.insecure:
            if entry in (host, name):
                return True
            try:
                if ipaddress.ip_address(name) in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
        return False

    def _endpoint(self, entry: str, *, mirror: bool) -> Endpoint:
        if "://" not in entry:
            host = entry.split("/", 1)[0]
            entry = f"{'http' if self.is_insecure(host) else 'https'}://{entry}"
        parts = urlsplit(entry)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise BadReference(entry, "a registry endpoint must be host[:port][/path] or a URL")
        path = parts.path.rstrip("/")
        if not path.endswith("/v2"):
            path += "/v2"  # as containerd: a mirror's path is a prefix before /v2
        return Endpoint(f"{parts.scheme}://{parts.netloc}{path}", parts.netloc, mirror)
