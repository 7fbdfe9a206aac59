"""Fixtures of the E2B SDK conformance suite: the official SDKs, unmodified, configured only by
the E2B_* environment variables (spec e2b-compat §1.4), against the shared platform.

Sandboxes are shared per module where a test does not change what the others observe (booting
one costs seconds under TCG); tests that kill, expire or reconfigure a sandbox create their own.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from e2b import AsyncSandbox, Sandbox

from aenv_cli.platform import Platform


@pytest.fixture(scope="session")
def e2b_vars(platform: Platform) -> Iterator[dict[str, str]]:
    """Points the SDKs at the platform the way a user would: through the environment."""
    values = platform.e2b_env()
    saved = {name: os.environ.get(name) for name in [*values, "E2B_DEBUG", "E2B_DOMAIN"]}
    os.environ.update(values)
    os.environ.pop("E2B_DEBUG", None)
    os.environ.pop("E2B_DOMAIN", None)
    try:
        yield values
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module")
def sbx(e2b_vars: dict[str, str]) -> Iterator[Sandbox]:
    sandbox = Sandbox.create(timeout=600)
    try:
        yield sandbox
    finally:
        # A test may have killed it already: a second kill answers False, not an error.
        sandbox.kill()


@pytest.fixture
def fresh_sbx(e2b_vars: dict[str, str]) -> Iterator[Sandbox]:
    """A sandbox of the test's own (for tests that kill or reconfigure it)."""
    sandbox = Sandbox.create(timeout=300)
    try:
        yield sandbox
    finally:
        # A test may have killed it already: a second kill answers False, not an error.
        sandbox.kill()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def async_sbx(e2b_vars: dict[str, str]) -> AsyncIterator[AsyncSandbox]:
    sandbox = await AsyncSandbox.create(timeout=600)
    try:
        yield sandbox
    finally:
        await sandbox.kill()
