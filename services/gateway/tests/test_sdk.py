"""The official e2b SDK against the gateway (E2B_API_URL = E2B_SANDBOX_URL = gateway)."""

from __future__ import annotations

import pytest
from e2b import AsyncSandbox
from e2b.exceptions import (
    AuthenticationException,
    SandboxException,
    SandboxNotFoundException,
)

from .conftest import Stack

pytestmark = pytest.mark.sdk


async def test_lifecycle(e2b_env: Stack) -> None:
    sbx = await AsyncSandbox.create("base", metadata={"who": "sdk test"}, timeout=120)
    info = await sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id and info.state.value == "running"
    assert info.metadata == {"who": "sdk test"}
    await sbx.set_timeout(600)
    connected = await AsyncSandbox.connect(sbx.sandbox_id)
    assert connected.sandbox_id == sbx.sandbox_id
    assert await sbx.kill() is True
    assert await AsyncSandbox.kill(sbx.sandbox_id) is False
    with pytest.raises(SandboxNotFoundException):
        await AsyncSandbox.get_info(sbx.sandbox_id)


async def test_list_with_filters_over_two_pages(e2b_env: Stack) -> None:
    from e2b import SandboxQuery

    ids = {
        (await AsyncSandbox.create("base", metadata={"team": "a&b=c"})).sandbox_id for _ in range(3)
    }
    await AsyncSandbox.create("base", metadata={"team": "other"})
    paginator = AsyncSandbox.list(query=SandboxQuery(metadata={"team": "a&b=c"}), limit=2)
    first = await paginator.next_items()
    assert paginator.has_next
    second = await paginator.next_items()
    assert not paginator.has_next
    assert {s.sandbox_id for s in first + second} == ids


async def test_error_mapping(e2b_env: Stack) -> None:
    with pytest.raises(SandboxException) as unknown:
        await AsyncSandbox.create("no-such-template")
    assert unknown.value.status_code == 404
    with pytest.raises(AuthenticationException):
        await AsyncSandbox.create("base", api_key="e2b_" + "f" * 40)
    with pytest.raises(SandboxNotFoundException):
        await AsyncSandbox.set_timeout("missing", 10)
    sbx = await AsyncSandbox.create("base")
    assert await sbx.pause() is True
    assert await sbx.pause() is False  # already paused: 409


async def test_envd_call_on_killed_sandbox(e2b_env: Stack) -> None:
    from e2b.exceptions import SandboxNotRunningException

    sbx = await AsyncSandbox.create("base")
    await sbx.kill()
    assert await sbx.is_running() is False
    with pytest.raises(SandboxNotRunningException):
        await sbx.files.read("/etc/hostname")
