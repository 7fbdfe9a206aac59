"""What a guest sees of TLS when its policy has header rules: the rule host answers with a
certificate the cluster's egress CA issued, which the guest trusts with nothing of its own
(envd installed the CA at /init: curl's system bundle, Python's default context, the variables
clients read), offering HTTP/1.1 only; a host without rules shows the guest its own certificate,
untouched end to end. A resume keeps all of it."""

from __future__ import annotations

import json

import pytest
from e2b import Sandbox

from aenv_cli.platform import Platform

from .conftest import create, guest_sh
from .internet import ALLOWED, OTHER, Internet, headers_of

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

EGRESS_CA = "/usr/local/share/ca-certificates/aenv-egress.crt"
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
TEST_CA = "/tmp/test-internet-ca.pem"
# (host, CA file or "" for the default context) -> the ALPN protocol, "unverified" or an error.
PROBE = """
import json, socket, ssl, sys
def probe(host, cafile):
    context = ssl.create_default_context(cafile=cafile or None)
    context.set_alpn_protocols(["h2", "http/1.1"])
    try:
        with socket.create_connection((host, 443), timeout=15) as raw:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                return tls.selected_alpn_protocol() or "none"
    except ssl.SSLCertVerificationError:
        return "unverified"
    except OSError as error:
        return type(error).__name__
print(json.dumps([probe(host, cafile) for host, cafile in json.loads(sys.argv[1])]))
"""


def test_a_rule_host_is_served_under_the_egress_ca_and_other_hosts_are_untouched(
    egress_sdk: Platform, internet: Internet,
) -> None:
    sandbox = create({
        "allow_out": [ALLOWED, OTHER], "deny_out": ["0.0.0.0/0"],
        "rules": {ALLOWED: [{"transform": {"headers": {"X-Rule": "applied"}}}]},
    })
    try:
        sandbox.files.write(TEST_CA, internet.ca_pem, user="root")
        sandbox.files.write("/tmp/tls_probe.py", PROBE, user="root")
        code, env = guest_sh(sandbox, f"env; grep -c 'aenv egress CA' {SYSTEM_BUNDLE}")
        assert f"SSL_CERT_FILE={SYSTEM_BUNDLE}" in env.splitlines(), env
        assert f"REQUESTS_CA_BUNDLE={SYSTEM_BUNDLE}" in env.splitlines()
        assert f"NODE_EXTRA_CA_CERTS={EGRESS_CA}" in env.splitlines()
        assert env.splitlines()[-1] == "2"  # the marker lines of one block
        cases = [(ALLOWED, ""), (ALLOWED, EGRESS_CA), (ALLOWED, TEST_CA),
                 (OTHER, ""), (OTHER, EGRESS_CA), (OTHER, TEST_CA)]
        code, out = guest_sh(sandbox, f"python3 /tmp/tls_probe.py '{json.dumps(cases)}'")
        assert code == 0, out
        # The rule host: the platform's leaf (HTTP/1.1 only), not the origin's; the other host:
        # its own certificate, which the guest does not trust by default.
        assert json.loads(out) == ["http/1.1", "http/1.1", "unverified",
                                   "unverified", "unverified", "http/1.1"]
        before = len(internet.requests())
        fetch = f"curl -sS -m 20 -o /dev/null -w '%{{http_code}}' https://{ALLOWED}/record"
        assert guest_sh(sandbox, fetch) == (0, "200")
        # A resume's /init finds the CA in place: still one block, still trusted.
        assert sandbox.pause() is True
        sandbox = Sandbox.connect(sandbox.sandbox_id)
        assert guest_sh(sandbox, f"grep -c 'aenv egress CA' {SYSTEM_BUNDLE}") == (0, "2\n")
        assert guest_sh(sandbox, fetch) == (0, "200")
    finally:
        sandbox.kill()
    seen = internet.requests()[before:]
    assert [headers_of(request, "X-Rule") for request in seen] == [["applied"], ["applied"]]
