"""E2B's Secret API through the unmodified SDK against the real platform (gateway, etcd):
create, update, get_info, paged list, exists and destroy; a taken name, an unknown secret,
another API key that can neither see nor destroy the first one's secrets; and afterwards the
values are nowhere in the platform's logs, traces or etcd's files (sealed at rest)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2b import AsyncSecret, Secret
from e2b.exceptions import SecretException, SecretNotFoundException

from aenv_cli.platform import Platform

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

PREFIX = "conf-" + secrets.token_hex(4)


@pytest.fixture
def other_key(platform: Platform, e2b_vars: dict[str, str]) -> Iterator[str]:
    """A second API key (made by the admin key), revoked afterwards."""
    admin = {"X-API-Key": platform.api_key}
    made = httpx.post(f"{platform.api_url}/admin/keys", headers=admin, json={"name": PREFIX})
    assert made.status_code == 201, made.text
    try:
        yield made.json()["key"]
    finally:
        httpx.delete(f"{platform.api_url}/admin/keys/{made.json()['keyID']}", headers=admin)


def _files_holding(roots: list[Path], needle: bytes) -> list[Path]:
    return [path for root in roots for path in root.rglob("*")
            if path.is_file() and needle in path.read_bytes()]


def test_secret_api_as_e2b_code_uses_it(platform: Platform, other_key: str) -> None:
    values = [f"value-{secrets.token_hex(16)}" for _ in range(4)]
    names = [f"{PREFIX}-{i}" for i in range(3)]
    try:
        created = Secret.create(names[0].upper(), values[0], metadata={"purpose": "conformance"})
        assert created.secret_id.startswith("sec_") and created.name == names[0]
        assert (created.version, created.metadata) == (1, {"purpose": "conformance"})
        assert created.created_at == created.updated_at

        updated = Secret.update(created.secret_id, values[1])
        assert updated.version == 2 and updated.metadata == {"purpose": "conformance"}
        assert updated.updated_at > created.updated_at
        info = Secret.get_info(names[0])
        assert (info.secret_id, info.version) == (created.secret_id, 2)
        assert Secret.exists(created.secret_id) and not Secret.exists(f"{PREFIX}-none")

        with pytest.raises(SecretException, match=r"409: secret .* already exists"):
            Secret.create(names[0], values[2])
        with pytest.raises(SecretNotFoundException):
            Secret.get_info(f"{PREFIX}-none")
        with pytest.raises(SecretNotFoundException):
            Secret.update(f"{PREFIX}-none", "x")
        assert Secret.destroy(f"{PREFIX}-none") is False

        for name, value in zip(names[1:], values[2:], strict=True):
            asyncio.run(AsyncSecret.create(name, value))
        paginator = Secret.list(limit=2)
        pages = []
        while paginator.has_next:
            pages.append([s.name for s in paginator.next_items()])
        mine = [n for page in pages for n in page if n.startswith(PREFIX)]
        assert sorted(mine) == names and all(len(page) <= 2 for page in pages)
        assert len(pages) >= 2

        # Another key sees nothing of these, cannot destroy them, and may use their names.
        assert [s for s in Secret.list(api_key=other_key).next_items()] == []
        assert not Secret.exists(created.secret_id, api_key=other_key)
        assert Secret.destroy(names[0], api_key=other_key) is False
        assert Secret.destroy(created.secret_id, api_key=other_key) is False
        theirs = Secret.create(names[0], "theirs", api_key=other_key)
        assert theirs.secret_id != created.secret_id
        assert Secret.get_info(names[0]).version == 2

        assert Secret.destroy(names[0]) is True
        assert not Secret.exists(names[0]) and Secret.exists(names[0], api_key=other_key)
    finally:
        for name in names:
            Secret.destroy(name)
        Secret.destroy(names[0], api_key=other_key)

    roots = [platform.home / "logs", platform.home / "traces", platform.home / "etcd"]
    assert all(root.is_dir() for root in roots)
    for value in values:
        assert _files_holding(roots, value.encode()) == []
    # The check can fail: the secrets' names (not confidential) are in the logs.
    assert _files_holding([platform.home / "logs"], names[0].encode())
