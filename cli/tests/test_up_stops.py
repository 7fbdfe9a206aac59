"""`aenv up`'s waits: work interrupted by a stop, or by the cancellation of `aenv up` itself,
has cleaned up after itself before the wait returns (a platform start left running on its own
would outlive the platform's stop)."""

from __future__ import annotations

import asyncio

from aenv_cli.up import _unless_stopped


async def _start_that_cleans_up(cleaned: list[str]) -> str:
    try:
        await asyncio.sleep(60)
        return "started"
    except asyncio.CancelledError:
        await asyncio.sleep(0.05)  # stopping what it started takes a while
        cleaned.append("stopped")
        raise


async def test_a_stop_cancels_the_work_and_waits_for_its_cleanup() -> None:
    cleaned: list[str] = []
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, stop.set)
    assert await _unless_stopped(_start_that_cleans_up(cleaned), stop) is None
    assert cleaned == ["stopped"]


async def test_being_cancelled_cancels_the_work_and_waits_for_its_cleanup() -> None:
    cleaned: list[str] = []
    waiting = asyncio.ensure_future(_unless_stopped(_start_that_cleans_up(cleaned),
                                                    asyncio.Event()))
    await asyncio.sleep(0.05)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert waiting.cancelled() and cleaned == ["stopped"]


async def test_finished_work_is_returned() -> None:
    async def quick() -> str:
        return "started"

    done = await _unless_stopped(quick(), asyncio.Event())
    assert done is not None and done.result() == "started"
