"""The dashboard in a real browser (Debian's chromium through Playwright) against the whole
platform: log in with the platform's key, see the sandboxes made with the SDK, filter them,
open one, pause and resume it and kill another through the buttons (each change checked through
the SDK) while other tabs see its table refresh itself and its events arrive live, then the
templates, nodes and events pages. Screenshots go to build/screenshots/."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from e2b import AsyncSandbox
from e2b.exceptions import NotFoundException
from playwright.async_api import Page, async_playwright, expect

from aenv_cli.platform import Platform

from ..conftest import sdk_environment_of

pytestmark = [
    pytest.mark.browser,
    pytest.mark.vm,
    pytest.mark.etcd,
    pytest.mark.netns,
    pytest.mark.sdk,
    pytest.mark.asyncio(loop_scope="session"),
    pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium"),
]

SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"
# Generous: a loaded 2-core host, with other tests' VMs beside these.
STEP_MS = 60_000


async def _until(check: Callable[[], Awaitable[bool]], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not await check():
        assert time.monotonic() < deadline, f"not within {within_s} s: {what}"
        await asyncio.sleep(0.5)


async def _state(sandbox_id: str) -> str:
    try:
        info = await AsyncSandbox.get_info(sandbox_id)
    except NotFoundException:
        return "gone"
    return str(info.state.value if hasattr(info.state, "value") else info.state)


@contextlib.asynccontextmanager
async def _sandboxes(run: str, count: int) -> AsyncIterator[list[str]]:
    """`count` sandboxes made with the SDK, tagged with this run; killed afterwards (also on
    failure; the ones the test killed are gone already)."""
    made: list[str] = []
    try:
        for n in range(count):
            sandbox = await AsyncSandbox.create(timeout=300, metadata={"dash": run, "n": str(n)})
            made.append(sandbox.sandbox_id)
        yield made
    finally:
        for sandbox_id in made:
            with contextlib.suppress(Exception):
                await AsyncSandbox.kill(sandbox_id)


async def _shot(page: Page, name: str) -> None:
    await page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


async def test_an_operator_drives_the_platform_from_the_dashboard(platform: Platform) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    run = uuid.uuid4().hex[:8]
    base = f"{platform.api_url}/dashboard"
    with sdk_environment_of(platform):
        async with _sandboxes(run, 2) as (first, second), async_playwright() as p:
            browser = await p.chromium.launch(executable_path=shutil.which("chromium"),
                                              args=["--no-sandbox"])
            try:
                context = await browser.new_context()  # one cookie jar for all its tabs
                page = await context.new_page()
                page.set_default_timeout(STEP_MS)
                await page.goto(f"{base}/login")
                await page.get_by_label("API key").fill(platform.api_key)
                await page.get_by_role("button", name="Log in").click()
                await expect(page).to_have_url(f"{base}/sandboxes")
                await expect(page.get_by_role("link", name=first)).to_be_visible()
                await expect(page.get_by_role("link", name=second)).to_be_visible()
                assert platform.api_key not in await page.content()
                await _shot(page, "sandboxes")

                # Filtered by the server: this run's first sandbox only.
                await page.get_by_label("Metadata").fill(f"dash={run} n=0")
                await page.get_by_role("button", name="Filter").click()
                await expect(page.get_by_role("link", name=first)).to_be_visible()
                await expect(page.get_by_role("link", name=second)).to_have_count(0)
                await _shot(page, "sandboxes-filtered")

                await page.get_by_role("link", name=first).click()
                await expect(page.get_by_role("heading", name=f"Sandbox {first}")).to_be_visible()
                await expect(page.get_by_role("heading", name="Logs")).to_be_visible()
                await expect(page.get_by_role("heading", name="Lifecycle events")).to_be_visible()
                await _shot(page, "sandbox")

                # Two more tabs, open meanwhile: the table refreshes itself, events arrive live.
                table, events = await context.new_page(), await context.new_page()
                await table.goto(f"{base}/sandboxes?metadata=dash%3D{run}")
                await events.goto(f"{base}/events")
                await expect(table.get_by_role("row", name=first)).to_contain_text("running")
                await page.get_by_role("button", name=f"Pause {first}").click()
                await expect(page.get_by_role("button", name=f"Resume {first}")).to_be_visible()
                await _until(lambda: _is(first, "paused"), 60, "paused through the dashboard")
                await expect(table.get_by_role("row", name=first)).to_contain_text(
                    "paused", timeout=30_000)
                await expect(events.get_by_role("row").filter(has_text=first)
                             .filter(has_text="paused")).to_have_count(1, timeout=30_000)
                await _shot(events, "events-live")
                await table.close()
                await events.close()
                await page.get_by_role("button", name=f"Resume {first}").click()
                await expect(page.get_by_role("button", name=f"Pause {first}")).to_be_visible()
                await _until(lambda: _is(first, "running"), 60, "resumed through the dashboard")

                await page.goto(f"{base}/sandboxes?metadata=dash%3D{run}")
                await page.get_by_role("button", name=f"Kill {second}").click()
                await expect(page).to_have_url(f"{base}/sandboxes")
                await _until(lambda: _is(second, "gone"), 60, "killed through the dashboard")
                assert await _state(first) == "running"

                for name, heading in (("templates", "Templates"), ("nodes", "Nodes"),
                                      ("events", "Events")):
                    await page.get_by_role("link", name=heading, exact=True).click()
                    await expect(page.get_by_role("heading", name=heading, level=1)).to_be_visible()
                    await _shot(page, name)
                # The node runs this platform's sandboxes; the events name what just happened.
                await page.get_by_role("link", name="Nodes", exact=True).click()
                await expect(page.get_by_role("rowheader", name="e2e-node")).to_be_visible()
                await page.get_by_role("link", name="Events", exact=True).click()
                await expect(page.get_by_role("link", name=second).first).to_be_visible()
            finally:
                await browser.close()


async def _is(sandbox_id: str, state: str) -> bool:
    return await _state(sandbox_id) == state
