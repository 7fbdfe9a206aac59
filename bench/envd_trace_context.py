"""What envd's trace context costs a request (aenv_envd/tracecontext.py), in process: the same
envd app's GET /envs without `traceparent`, with one (a span made and handed back in headers),
and the floor — the app without the trace-context middleware — in the same run."""

from __future__ import annotations

import asyncio
import os
import statistics
import time

import httpx
from _stats import emit
from starlette.types import ASGIApp

from aenv_envd.app import build_app
from aenv_envd.config import EnvdConfig
from aenv_envd.state import SandboxState

REQUESTS = int(os.environ.get("BENCH_REQUESTS", "1000"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def timed(app: ASGIApp, headers: dict[str, str]) -> list[float]:
    transport = httpx.ASGITransport(app=app)
    samples = []
    async with httpx.AsyncClient(transport=transport, base_url="http://envd") as client:
        for _ in range(REQUESTS):
            started = time.perf_counter()
            reply = await client.get("/envs", headers=headers)
            samples.append(time.perf_counter() - started)
            assert reply.status_code == 200
    return samples


async def main() -> None:
    state = SandboxState()
    traced = build_app(EnvdConfig(sync_clock=False, reseed_rng=False), state)
    floor = traced._app  # the same app inside the trace-context middleware
    runs: dict[str, tuple[ASGIApp, dict[str, str]]] = {
        "floor_no_middleware": (floor, {}),
        "untraced": (traced, {}),
        "traced": (traced, {"traceparent": TRACEPARENT}),
    }
    # Interleaved rounds: the host's load drifts alike for all three.
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(ROUNDS):
        for name, (app, headers) in runs.items():
            samples[name] += await timed(app, headers)
    median_us = {name: round(statistics.median(s) * 1e6, 1) for name, s in samples.items()}
    base = median_us["floor_no_middleware"]
    emit(
        "envd_trace_context",
        {
            "requests": REQUESTS * ROUNDS,
            "median_us": median_us,
            "ratio_untraced_to_floor": round(median_us["untraced"] / base, 3),
            "ratio_traced_to_floor": round(median_us["traced"] / base, 3),
        },
    )


if __name__ == "__main__":
    asyncio.run(main())
