"""What the volume tests do inside guests and around them: commands as root, the SDK's
environment (with the volume content API on the gateway), volumes made and removed."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator, Mapping

import httpx
import pytest
from e2b import AsyncSandbox, AsyncVolume

# A sandbox's time to live: long enough for a module's tests under TCG.
SANDBOX_TIMEOUT_S = 900
COMMAND_TIMEOUT_S = 300.0

# The guest's view of an NFS write past the quota and to a read-only mount.
ENOSPC_TEXT = "No space left on device"
EROFS_TEXT = "Read-only file system"

# Writes a file and reports what the kernel said: "ok", or the errno's name and text.
# python3's open/write/fsync/close, so a late error (NFS reports async writes at fsync or
# close) is seen too.
WRITE_PROBE = r"""
import errno, os, sys
path, size = sys.argv[1], int(sys.argv[2])
try:
    with open(path, "wb") as f:
        block = os.urandom(1 << 20)
        left = size
        while left:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n
        f.flush()
        os.fsync(f.fileno())
    print("ok")
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno), e.strerror)
"""


def unique(prefix: str) -> str:
    """A volume name of E2B's alphabet no other run uses."""
    return f"{prefix}-{secrets.token_hex(4)}"


@contextlib.contextmanager
def sdk_environment(env: Mapping[str, str]) -> Iterator[None]:
    """The SDK's endpoints and key from `env`: the platform's e2b.env, whose
    E2B_VOLUME_API_URL points the volume content calls at the gateway."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        patch.delenv("E2B_DEBUG", raising=False)
        patch.delenv("E2B_DOMAIN", raising=False)
        yield


async def sh(sandbox: AsyncSandbox, command: str, *, user: str = "root") -> str:
    """The command's stdout; a non-zero exit raises (the SDK's CommandExitException)."""
    result = await sandbox.commands.run(
        command, user=user, timeout=COMMAND_TIMEOUT_S, request_timeout=COMMAND_TIMEOUT_S + 30
    )
    return result.stdout


async def sh_status(sandbox: AsyncSandbox, command: str) -> tuple[int, str]:
    """(exit code, stdout+stderr) of a command that may fail."""
    out = await sh(sandbox, f'( {command} ) 2>&1; echo "rc=$?"')
    body, _, code = out.rstrip("\n").rpartition("rc=")
    return int(code), body


async def install_write_probe(sandbox: AsyncSandbox) -> None:
    await sandbox.files.write("/root/write_probe.py", WRITE_PROBE, user="root")


async def write_probe(sandbox: AsyncSandbox, path: str, size: int) -> str:
    return (await sh(sandbox, f"python3 /root/write_probe.py {path} {size}")).strip()


async def create_volume(
    api_url: str, api_key: str, name: str, *, quota_bytes: int | None = None
) -> AsyncVolume:
    """A volume by the SDK, or (with a quota: an aenv extension of POST /volumes) by HTTP."""
    if quota_bytes is None:
        return await AsyncVolume.create(name)
    async with httpx.AsyncClient(base_url=api_url, timeout=60) as http:
        answer = await http.post(
            "/volumes",
            json={"name": name, "quotaBytes": quota_bytes},
            headers={"X-API-Key": api_key},
        )
    assert answer.status_code == 201, answer.text
    body = answer.json()
    return AsyncVolume(body["volumeID"], body["name"], token=body["token"])


@contextlib.asynccontextmanager
async def destroyed_after(volumes: list[AsyncVolume]) -> AsyncIterator[list[AsyncVolume]]:
    """Every volume appended to the list is destroyed when the block ends (also on failure)."""
    try:
        yield volumes
    finally:
        for volume in volumes:
            with contextlib.suppress(Exception):
                await AsyncVolume.destroy(volume.volume_id)


async def kill_quietly(sandbox_ids: list[str]) -> None:
    for sandbox_id in sandbox_ids:
        with contextlib.suppress(Exception):
            await AsyncSandbox.kill(sandbox_id)
