"""WWW-Authenticate challenges and the credentials file."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from aenv_common.errors import InvalidArgument
from aenv_nodeagent.images.auth import load_credentials, parse_www_authenticate


def test_bearer_challenge() -> None:
    [c] = parse_www_authenticate(
        'Bearer realm="https://auth.example/token",service="registry.example",'
        'scope="repository:library/busybox:pull"')
    assert c.scheme == "bearer"
    assert dict(c.params) == {"realm": "https://auth.example/token",
                              "service": "registry.example",
                              "scope": "repository:library/busybox:pull"}


def test_scope_with_commas_spaces_and_escapes() -> None:
    [c] = parse_www_authenticate(
        'bearer  realm = "http://127.0.0.1:1/t" , scope="repository:a:pull,push '
        'repository:b:pull", error="insufficient_scope", note="say \\"hi\\""')
    assert c.params["scope"] == "repository:a:pull,push repository:b:pull"
    assert c.params["error"] == "insufficient_scope"
    assert c.params["note"] == 'say "hi"'


def test_several_challenges_and_token_values() -> None:
    challenges = parse_www_authenticate('Basic realm="Registry Realm", Bearer realm=x,service=y')
    assert [(c.scheme, dict(c.params)) for c in challenges] == [
        ("basic", {"realm": "Registry Realm"}), ("bearer", {"realm": "x", "service": "y"})]


@pytest.mark.parametrize("header", ["", "   ", ",", '"junk'])
def test_junk_gives_no_challenge(header: str) -> None:
    assert parse_www_authenticate(header) == []


def test_credentials_file_in_docker_config_shape(tmp_path: Path) -> None:
    path = tmp_path / "auth.json"
    path.write_text(json.dumps({"auths": {
        "https://index.docker.io/v1/": {"auth": base64.b64encode(b"hubuser:hub:pw").decode()},
        "127.0.0.1:5000": {"username": "u", "password": "p"},
        "https://reg.internal/v2/": {"auth": base64.b64encode(b"a:b").decode()},
    }}))
    creds = load_credentials(path)
    hub = creds.for_host("docker.io")
    assert hub is not None and (hub.user, hub.password) == ("hubuser", "hub:pw")
    local = creds.for_host("127.0.0.1:5000")
    assert local is not None and local.password == "p"
    assert creds.for_host("reg.internal") is not None
    assert "pw" not in repr(creds) and "hubuser" not in repr(creds)


def test_unreadable_credentials_name_the_file_not_the_content(tmp_path: Path) -> None:
    path = tmp_path / "auth.json"
    path.write_text('{"auths": {"h": {"username": "u", "password": "s3cret"')
    with pytest.raises(InvalidArgument) as err:
        load_credentials(path)
    assert str(path) in err.value.message and "s3cret" not in err.value.message
    assert load_credentials(None).by_host == {}
