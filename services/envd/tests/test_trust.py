"""/init's egress CA: written once to the guest's CA folder and system bundle (a new CA replaces
the old block), default variables for clients unless the sandbox set its own, and a bad PEM
refused."""

from __future__ import annotations

import datetime as dt
import shutil
import ssl
from pathlib import Path
from typing import cast

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from starlette.testclient import TestClient

from aenv_envd import control_http
from aenv_envd.app import build_app
from aenv_envd.config import EnvdConfig
from aenv_envd.state import SandboxState
from aenv_envd.trust import BEGIN_MARKER, TrustPaths, check_pem, install_ca

Subject = tuple[tuple[tuple[str, str], ...], ...]  # as ssl reports a certificate's subject
HOST_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def _ca_pem(name: str) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


@pytest.fixture
def paths(tmp_path: Path) -> TrustPaths:
    bundle = tmp_path / "etc/ssl/certs/ca-certificates.crt"
    bundle.parent.mkdir(parents=True)
    shutil.copyfile(HOST_BUNDLE, bundle)
    return TrustPaths(ca_file=str(tmp_path / "usr/local/share/ca-certificates/aenv-egress.crt"),
                      system_bundles=(str(tmp_path / "absent.crt"), str(bundle)))


def _trusted_names(bundle: str) -> set[str]:
    context = ssl.create_default_context(cafile=bundle)
    subjects = [cast(Subject, cert["subject"]) for cert in context.get_ca_certs()]
    return {value for subject in subjects for rdn in subject for key, value in rdn
            if key == "commonName"}


def test_the_ca_joins_the_bundle_once_and_a_new_one_replaces_it(paths: TrustPaths) -> None:
    first = check_pem(_ca_pem("aenv egress CA one"))
    env = install_ca(first, paths)
    bundle = Path(paths.system_bundles[1])  # the first that exists
    assert env == {"SSL_CERT_FILE": str(bundle), "REQUESTS_CA_BUNDLE": str(bundle),
                   "NODE_EXTRA_CA_CERTS": paths.ca_file}
    installed = bundle.read_text()
    before = bundle.stat().st_mtime_ns
    install_ca(first, paths)  # a resume's /init
    assert bundle.read_text() == installed and bundle.stat().st_mtime_ns == before
    names = _trusted_names(paths.system_bundles[1])
    assert "aenv egress CA one" in names and len(names) > 10  # the system's CAs are kept
    install_ca(check_pem(_ca_pem("aenv egress CA two")), paths)
    assert bundle.read_text().count(BEGIN_MARKER) == 1
    assert "aenv egress CA one" not in _trusted_names(paths.system_bundles[1])
    assert "aenv egress CA two" in _trusted_names(paths.ca_file)
    assert Path(paths.ca_file).stat().st_mode & 0o777 == 0o644


def test_without_a_system_bundle_only_node_is_given_the_ca(tmp_path: Path) -> None:
    paths = TrustPaths(ca_file=str(tmp_path / "ca/aenv-egress.crt"),
                       system_bundles=(str(tmp_path / "missing.crt"),))
    env = install_ca(check_pem(_ca_pem("aenv egress CA")), paths)
    assert env == {"NODE_EXTRA_CA_CERTS": paths.ca_file}  # certifi's users keep their CAs
    assert not Path(paths.system_bundles[0]).exists()


def test_init_sets_client_defaults_the_sandboxs_own_variables_override(
    paths: TrustPaths,
) -> None:
    state = SandboxState()
    config = EnvdConfig(sync_clock=False, reseed_rng=False, trust_paths=paths)
    pem = _ca_pem("aenv egress CA")
    with TestClient(build_app(config, state)) as client:
        body = {"accessToken": "t", "egressCaCert": pem,
                "envVars": {"REQUESTS_CA_BUNDLE": "/mine.pem"}}
        assert client.post("/init", json=body).status_code == 204
        envs = client.get("/envs", headers={"x-access-token": "t"}).json()
        bad = client.post("/init", json={"egressCaCert": "not a certificate"},
                          headers={"x-access-token": "t"})
    assert envs == {"REQUESTS_CA_BUNDLE": "/mine.pem", "SSL_CERT_FILE": paths.system_bundles[1],
                    "NODE_EXTRA_CA_CERTS": paths.ca_file}
    assert Path(paths.ca_file).read_text() == pem
    assert bad.status_code == 400 and "PEM" in bad.text


def test_an_init_repeating_the_installed_ca_leaves_the_files_alone(
    paths: TrustPaths, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A restored guest's /init names the CA its capture installed: nothing is read again."""
    state = SandboxState()
    config = EnvdConfig(sync_clock=False, reseed_rng=False, trust_paths=paths)
    first, second = _ca_pem("aenv egress CA"), _ca_pem("aenv egress CA two")
    installs: list[str] = []
    real = install_ca

    def counted(pem: str, where: TrustPaths) -> dict[str, str]:
        installs.append(pem)
        return real(pem, where)

    monkeypatch.setattr(control_http, "install_ca", counted)
    with TestClient(build_app(config, state)) as client:
        for pem in (first, first, second, second):
            body = {"accessToken": "t", "egressCaCert": pem}
            answer = client.post("/init", json=body, headers={"x-access-token": "t"})
            assert answer.status_code == 204
        envs = client.get("/envs", headers={"x-access-token": "t"}).json()
    assert [check_pem(p) for p in (first, second)] == installs
    assert Path(paths.ca_file).read_text() == check_pem(second)
    assert envs["NODE_EXTRA_CA_CERTS"] == paths.ca_file
