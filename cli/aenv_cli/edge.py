"""The platform's public edge: what an E2B SDK configured with only `E2B_API_KEY` and
`E2B_DOMAIN` reaches. The SDK calls `https://api.<domain>` and `https://<port>-<id>.<domain>`,
so the gateway terminates TLS for `<domain>` and `*.<domain>` (a given certificate, or one from
the node's own CA, `selfsigned.py`) and the domain's DNS must point both names at this node.

    edge = PublicEdge("sbx.example.com")           # 0.0.0.0:443, self-signed
    edge.gateway_environment(home)                 # AENV_GATEWAY_* for the gateway
    dns_records(edge.domain, ["192.0.2.10"])       # what to put in the domain's zone
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from aenv_cli.selfsigned import TlsFiles, ensure_self_signed, tls_files
from aenv_common.errors import InvalidArgument

DEFAULT_LISTEN = "0.0.0.0:443"
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
# Where a route lookup says this node's traffic leaves from (nothing is sent: it asks the FIB).
_ROUTE_PROBE = "192.0.2.1"


@dataclass(frozen=True)
class PublicEdge:
    domain: str
    listen: str = DEFAULT_LISTEN
    # Both or neither; neither: a certificate from the node's own CA under $AENV_HOME/tls.
    cert_file: Path | None = None
    key_file: Path | None = None

    def __post_init__(self) -> None:
        check_domain(self.domain)
        if (self.cert_file is None) != (self.key_file is None):
            raise InvalidArgument("a TLS certificate needs its key, and a key its certificate")

    @property
    def self_signed(self) -> bool:
        return self.cert_file is None

    @property
    def listen_host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    def tls_files(self, home: Path) -> TlsFiles | None:
        """The node CA's files this edge uses (None with a given certificate)."""
        return tls_files(home / "tls") if self.self_signed else None

    def prepare(self, home: Path) -> None:
        """Makes the self-signed certificate current before the gateway loads it."""
        if self.self_signed:
            ensure_self_signed(home / "tls", self.domain)

    def gateway_environment(self, home: Path) -> dict[str, str]:
        own = self.tls_files(home)
        cert = own.cert if own else self.cert_file
        key = own.key if own else self.key_file
        return {
            "AENV_GATEWAY_DOMAIN": self.domain,
            "AENV_GATEWAY_TLS_LISTEN": self.listen,
            "AENV_GATEWAY_TLS_CERT_FILE": str(cert),
            "AENV_GATEWAY_TLS_KEY_FILE": str(key),
        }

    def e2b_env_lines(self, api_key: str, home: Path) -> list[str]:
        """What an SDK program needs: the key and the domain (and our CA, when self-signed:
        the bundle keeps the system's CAs, so other HTTPS keeps working)."""
        lines = [f"E2B_API_KEY={api_key}", f"E2B_DOMAIN={self.domain}"]
        own = self.tls_files(home)
        if own is not None:
            lines.append(f"SSL_CERT_FILE={own.bundle}")
        return lines


def check_domain(domain: str) -> None:
    """:raise InvalidArgument: not a lower-case DNS name of at least two labels."""
    labels = domain.split(".")
    if len(domain) > 253 or len(labels) < 2 or not all(_LABEL.match(x) for x in labels):
        raise InvalidArgument(
            f"domain {domain!r} is not a DNS name like sbx.example.com (lower case, 2+ labels)"
        )


def dns_records(domain: str, addresses: list[str]) -> list[str]:
    """The zone lines the domain needs (and the one-line dnsmasq equivalent)."""
    lines = []
    for address in addresses:
        kind = "AAAA" if ":" in address else "A"
        lines += [f"api.{domain}.  {kind}  {address}", f"*.{domain}.    {kind}  {address}"]
    lines += [f"dnsmasq: address=/{domain}/{address}" for address in addresses]
    return lines


def advertised_addresses(listen_host: str) -> list[str]:
    """The address clients should reach: the listen address, or for a wildcard listen the
    address this node's traffic leaves from (none known: empty)."""
    if listen_host not in ("0.0.0.0", "::", ""):
        return [listen_host]
    try:
        out = subprocess.run(["ip", "-j", "route", "get", _ROUTE_PROBE], capture_output=True,
                             text=True, timeout=5, check=True).stdout
        source = json.loads(out)[0].get("prefsrc")
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return []
    return [source] if isinstance(source, str) else []
