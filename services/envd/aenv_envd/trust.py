"""The cluster's egress CA in the guest's trust stores (`POST /init`'s `egressCaCert`).

A sandbox whose policy has header rules (`network.rules`) reaches those hosts over TLS the node
terminates with certificates issued by the cluster's "aenv egress CA"; every other host's TLS is
untouched. For the guest's clients to accept those certificates, envd installs the CA at every
/init (boot, resume, fork, template capture alike):

- `/usr/local/share/ca-certificates/aenv-egress.crt`, where Debian's `update-ca-certificates`
  picks it up again if the guest rebuilds its bundle (an `apt install` of ca-certificates);
- the system bundle (OpenSSL, curl, wget, git): the first of Debian's, Alpine's
  `/etc/ssl/certs/ca-certificates.crt`, Fedora's `/etc/pki/tls/certs/ca-bundle.crt` or SUSE's
  `/etc/ssl/ca-bundle.pem` the image has, once, between marker lines: a later /init with another
  CA (a template captured in another cluster) replaces the block instead of adding a second one;
- default variables for processes envd starts, unless the sandbox's own set them:
  `SSL_CERT_FILE` and `REQUESTS_CA_BUNDLE` (Python's ssl, httpx, requests, pip) name the bundle,
  `NODE_EXTRA_CA_CERTS` (Node.js) the CA file. They are part of /envs, so the code interpreter's
  kernels get them too. An image without a system bundle gets `NODE_EXTRA_CA_CERTS` only:
  pointing the others at the CA alone would take away the public CAs their clients bring
  (certifi's) for every other host.

Repeating an /init with the same CA changes nothing on disk.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

MAX_PEM_BYTES = 16 * 1024
BEGIN_MARKER = "# aenv egress CA, installed by envd: begin\n"
END_MARKER = "# aenv egress CA, installed by envd: end\n"
_BLOCK = re.compile(re.escape(BEGIN_MARKER) + ".*?" + re.escape(END_MARKER), re.DOTALL)
_PEM = re.compile(r"-----BEGIN CERTIFICATE-----\n[A-Za-z0-9+/=\n]+-----END CERTIFICATE-----\n?")


@dataclass(frozen=True)
class TrustPaths:
    ca_file: str = "/usr/local/share/ca-certificates/aenv-egress.crt"
    system_bundles: tuple[str, ...] = (
        "/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
        "/etc/ssl/ca-bundle.pem")


def check_pem(pem: str) -> str:
    """One PEM certificate, normalised to end with a newline (raises ValueError)."""
    pem = pem.replace("\r\n", "\n").strip() + "\n"
    if len(pem) > MAX_PEM_BYTES or not _PEM.fullmatch(pem):
        raise ValueError("egressCaCert must be one PEM certificate")
    return pem


def install_ca(pem: str, paths: TrustPaths) -> dict[str, str]:
    """Installs the CA (`pem` from check_pem); returns the variables that point clients at it.
    Raises OSError when the guest's files cannot be written (envd not root)."""
    os.makedirs(os.path.dirname(paths.ca_file), mode=0o755, exist_ok=True)
    _write_if_changed(paths.ca_file, pem)
    env = {"NODE_EXTRA_CA_CERTS": paths.ca_file}
    bundle = next((path for path in paths.system_bundles if os.path.isfile(path)), None)
    if bundle is not None:
        _put_in_bundle(bundle, pem)
        env |= {"SSL_CERT_FILE": bundle, "REQUESTS_CA_BUNDLE": bundle}
    return env


def _put_in_bundle(path: str, pem: str) -> None:
    with open(path) as file:
        current = file.read()
    kept = _BLOCK.sub("", current)
    if kept and not kept.endswith("\n"):
        kept += "\n"
    _write_if_changed(path, kept + BEGIN_MARKER + pem + END_MARKER, current)


def _write_if_changed(path: str, content: str, current: str | None = None) -> None:
    if current is None and os.path.isfile(path):
        with open(path) as file:
            current = file.read()
    if current == content:
        return
    # The bundle may be a symlink into /usr/share: replace the file it names, atomically.
    target = os.path.realpath(path)
    staged = f"{target}.aenv-{os.getpid()}"
    with open(staged, "w") as file:
        os.fchmod(file.fileno(), 0o644)
        file.write(content)
    os.replace(staged, target)
