"""A volume on an S3-backed snapstore (a real moto server) with a real guest: what the
guest wrote and closed is in the bucket; snapstore restarted with its local working copies
wiped reads it back from S3 — to the same running guest (its NFS client re-dials through the
relay), to the content API and to a new sandbox — and takes new writes."""

from __future__ import annotations

import contextlib
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from aiobotocore.session import get_session
from e2b import AsyncSandbox, AsyncVolume

from aenv_cli.platform import Platform
from aenv_testing.ports import free_port

from ..conftest import lone_platform_env, running_platform
from .volumes.guest import SANDBOX_TIMEOUT_S, sdk_environment, sh, unique

pytestmark = [
    pytest.mark.vm,
    pytest.mark.sdk,
    pytest.mark.etcd,
    pytest.mark.netns,
    pytest.mark.s3,
    pytest.mark.asyncio(loop_scope="session"),
]

BUCKET = "e2e-volumes"
S3_KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    """A moto S3 server on a free loopback port (its endpoint), killed by PID after."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, "moto exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "moto not listening"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def s3_platform(
    tmp_path_factory: pytest.TempPathFactory, moto: str
) -> AsyncIterator[Platform]:
    prefix = "aev" + "".join(secrets.choice("abcdefghij") for _ in range(3)) + "x"
    env = lone_platform_env(
        prefix,
        AENV_NODEAGENT_WARM_POOL_VMS="0",
        AENV_NODEAGENT_WARM_POOL_GUESTS="0",
        AENV_SNAPSTORE_BACKEND="s3",
        AENV_SNAPSTORE_S3_ENDPOINT_URL=moto,
        AENV_SNAPSTORE_S3_BUCKET=BUCKET,
        AENV_SNAPSTORE_S3_CREATE_BUCKET="true",
        AENV_SNAPSTORE_S3_ACCESS_KEY_ID=S3_KEYS["AWS_ACCESS_KEY_ID"],
        AENV_SNAPSTORE_S3_SECRET_ACCESS_KEY=S3_KEYS["AWS_SECRET_ACCESS_KEY"],
    )
    async with running_platform(tmp_path_factory.mktemp("volumes-s3"), env, prefix) as plat:
        yield plat


async def test_a_volume_on_s3_outlives_a_snapstore_restart(s3_platform: Platform) -> None:
    with sdk_environment(s3_platform.e2b_env()):
        volume = await AsyncVolume.create(unique("ons3"))
        made: list[str] = []
        try:
            guest = await AsyncSandbox.create(
                timeout=SANDBOX_TIMEOUT_S, volume_mounts={"/data": volume}
            )
            made.append(guest.sandbox_id)
            digest = await sh(
                guest, "head -c 5242880 /dev/urandom > /data/blob && md5sum < /data/blob"
            )
            await sh(guest, "mkdir -p /data/d && echo small > /data/d/small.txt")
            assert any(k.startswith("volumes/") for k in await _bucket_keys(moto_of(s3_platform)))

            async with s3_platform.service_down("snapstore"):
                # Nothing local survives: the restarted server has only the bucket.
                shutil.rmtree(s3_platform.home / "volumes", ignore_errors=True)
            await sh(guest, "sync; echo 3 > /proc/sys/vm/drop_caches")
            assert await sh(guest, "md5sum < /data/blob") == digest
            assert await sh(guest, "cat /data/d/small.txt") == "small\n"
            assert await volume.read_file("/d/small.txt") == "small\n"
            await sh(guest, "echo after-restart > /data/after.txt")

            fresh = await AsyncSandbox.create(timeout=300, volume_mounts={"/data": volume})
            made.append(fresh.sandbox_id)
            assert await sh(fresh, "md5sum < /data/blob") == digest
            assert await sh(fresh, "cat /data/after.txt") == "after-restart\n"
        finally:
            for sandbox_id in made:
                with contextlib.suppress(Exception):
                    await AsyncSandbox.kill(sandbox_id)
            with contextlib.suppress(Exception):
                await AsyncVolume.destroy(volume.volume_id)


def moto_of(platform: Platform) -> str:
    return platform.service_env()["AENV_SNAPSTORE_S3_ENDPOINT_URL"]


async def _bucket_keys(endpoint: str) -> list[str]:
    async with get_session().create_client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=S3_KEYS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=S3_KEYS["AWS_SECRET_ACCESS_KEY"],
    ) as client:
        keys: list[str] = []
        paginator = client.get_paginator("list_objects_v2")
        async for page in paginator.paginate(Bucket=BUCKET):
            keys += [o["Key"] for o in page.get("Contents", [])]
        return keys
