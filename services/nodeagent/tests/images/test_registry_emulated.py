"""The registry client against an in-test registry with Docker's bearer-token flow, a token
server, blobs behind redirects, and mirrors that fail (loopback only, fast)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aenv_nodeagent.images import BlobCache, RegistryHosts, RegistrySource, build_base_disk
from aenv_nodeagent.images.auth import Credentials, Login
from aenv_nodeagent.images.errors import ImageNotFound, RegistryAuthFailed, RegistryUnavailable
from aenv_nodeagent.images.registry import RegistryClient, new_session
from aenv_nodeagent.images.sources import layer_line
from aenv_testing.ports import free_port  # nothing listens there: refused

from .emulator import PASSWORD, USER, Emulator, running
from .layers import Entry, make_layer, write_layout


@pytest.fixture
async def emulator(tmp_path: Path) -> AsyncIterator[Emulator]:
    layout = tmp_path / "layout"
    write_layout(layout, [make_layer([Entry("etc/hello", data=b"hi")]),
                          make_layer([Entry("etc/bye", data=b"bye")], "zstd")], as_index=True)
    async with running(Emulator(layout)) as emu:
        yield emu


def creds(host: str, password: str = PASSWORD) -> Credentials:
    return Credentials({host: Login(USER, password)})


async def test_bearer_flow_redirects_and_cache(emulator: Emulator, tmp_path: Path) -> None:
    source = RegistrySource(f"{emulator.host}/team/app", credentials=creds(emulator.host))
    cache = BlobCache(tmp_path / "cache")
    disk = await build_base_disk(source, cache, tmp_path / "out", 32)
    assert (disk.downloaded_blobs, disk.cached_blobs) == (2, 0)
    assert emulator.requests["token"] == 1, "one token serves the whole pull"
    assert emulator.storage_auth_headers == ["", "", ""], "no Authorization past a redirect"
    again = await build_base_disk(source, cache, tmp_path / "out2", 32)
    assert (again.downloaded_blobs, again.cached_blobs) == (0, 2)


async def test_wrong_password(emulator: Emulator, tmp_path: Path) -> None:
    source = RegistrySource(f"{emulator.host}/team/app",
                            credentials=creds(emulator.host, "wrong"))
    with pytest.raises(RegistryAuthFailed) as err:
        await source.pull(BlobCache(tmp_path))
    assert "wrong user name or password" in err.value.message
    assert "wrong" not in err.value.message.replace("wrong user", "")


async def test_anonymous_is_refused(emulator: Emulator, tmp_path: Path) -> None:
    with pytest.raises(RegistryAuthFailed, match="anonymous access denied"):
        await RegistrySource(f"{emulator.host}/team/app").pull(BlobCache(tmp_path))


async def test_unknown_tag(emulator: Emulator, tmp_path: Path) -> None:
    source = RegistrySource(f"{emulator.host}/team/app:nope", credentials=creds(emulator.host))
    with pytest.raises(ImageNotFound, match="MANIFEST_UNKNOWN"):
        await source.pull(BlobCache(tmp_path))


async def test_ping(emulator: Emulator) -> None:
    async with new_session() as session:
        await RegistryClient(session, RegistryHosts(), creds(emulator.host)).ping(emulator.host)


async def test_failing_mirrors_fall_through_to_upstream(
    emulator: Emulator, tmp_path: Path
) -> None:
    dead = f"127.0.0.1:{free_port()}"
    hosts = RegistryHosts(mirrors={emulator.host: [dead]})
    source = RegistrySource(f"{emulator.host}/team/app", hosts, creds(emulator.host))
    pulled = await source.pull(BlobCache(tmp_path))
    assert len(pulled.layers) == 2


async def test_mirror_only_and_unreachable(emulator: Emulator, tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"
    hosts = RegistryHosts(mirrors={"docker.io": [dead]}, mirror_only=["docker.io"])
    with pytest.raises(RegistryUnavailable, match="is unavailable"):
        await RegistrySource("busybox", hosts).pull(BlobCache(tmp_path))


async def test_a_mirror_serves_with_its_own_credentials(emulator: Emulator, tmp_path: Path
                                                        ) -> None:
    # The emulator as docker.io's mirror: requests carry ?ns=docker.io, credentials are the
    # mirror host's.
    hosts = RegistryHosts(mirrors={"docker.io": [emulator.host]}, mirror_only=["docker.io"])
    source = RegistrySource("team/app", hosts, creds(emulator.host))
    pulled = await source.pull(BlobCache(tmp_path))
    assert pulled.name == "docker.io/team/app:latest" and len(pulled.layers) == 2
    assert emulator.namespaces == {"docker.io"}


async def test_each_layer_is_told_once_had_downloaded_then_cached(
    emulator: Emulator, tmp_path: Path
) -> None:
    told: list[tuple[int, int, str, bool]] = []
    source = RegistrySource(f"{emulator.host}/team/app", credentials=creds(emulator.host),
                            on_layer=lambda n, count, desc, got: told.append(
                                (n, count, layer_line(n, count, desc, got), got)))
    cache = BlobCache(tmp_path / "cache")
    await source.pull(cache)
    await source.pull(cache)
    assert sorted((n, count, got) for n, count, _, got in told[:2]) == [(1, 2, True), (2, 2, True)]
    assert sorted((n, got) for n, _, _, got in told[2:]) == [(1, False), (2, False)]
    assert all(re.fullmatch(r"layer \d/2 sha256:[0-9a-f]{12} \(\d+\.\d MiB\) (pulled|cached)",
                            line) for _, _, line, _ in told)
