"""Batch create of 16 through the native API beside 16 concurrent E2B creates, in one platform
run: each round times one `CreateSandboxes(count=16)` through aenv_client and 16
`AsyncSandbox.create` of the official SDK at once (the order alternating between rounds), both
until every sandbox's create answered (the node agent answers after envd's /init), then kills
them (not timed). Reports the wall time of each side's 16 and, for the SDK, each create's.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import Counter
from pathlib import Path

from _platform import running_platform
from _stats import emit, summary_ms
from e2b import AsyncSandbox

from aenv_cli.platform import Platform
from aenv_client import AenvError, GatewayClient
from aenv_testing.subnets import free_subnet

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
N = int(os.environ.get("BENCH_BATCH", "16"))
CREATE_TIMEOUT_S = 600.0


# Why creates failed, by side and message (a benchmark that loses creates says why).
ERRORS: Counter[str] = Counter()


async def native_batch(client: GatewayClient) -> tuple[float, list[str], int]:
    t0 = time.perf_counter()
    outcomes = await client.create_sandboxes("base", count=N, timeout_seconds=600,
                                             timeout_s=CREATE_TIMEOUT_S)
    wall = time.perf_counter() - t0
    made = [o.sandbox_id for o in outcomes if not isinstance(o, AenvError)]
    ERRORS.update(f"native: {o.message}" for o in outcomes if isinstance(o, AenvError))
    return wall, made, len(outcomes) - len(made)


async def _timed_sdk_create() -> tuple[float, AsyncSandbox]:
    t0 = time.perf_counter()
    sandbox = await AsyncSandbox.create("base", timeout=600, request_timeout=CREATE_TIMEOUT_S)
    return time.perf_counter() - t0, sandbox


async def sdk_concurrent() -> tuple[float, list[float], list[AsyncSandbox], int]:
    t0 = time.perf_counter()
    results = await asyncio.gather(*(_timed_sdk_create() for _ in range(N)),
                                   return_exceptions=True)
    wall = time.perf_counter() - t0
    made = [r for r in results if not isinstance(r, BaseException)]
    ERRORS.update(f"sdk: {r}" for r in results if isinstance(r, BaseException))
    return wall, [t for t, _ in made], [s for _, s in made], N - len(made)


async def rounds(plat: Platform) -> dict[str, object]:
    os.environ.update(plat.e2b_env())
    native_walls, sdk_walls, sdk_each = [], [], []
    failures = {"native": 0, "sdk": 0}
    async with GatewayClient(plat.grpc_address, plat.api_key, timeout_s=CREATE_TIMEOUT_S) as c:
        for i in range(ROUNDS):
            for side in (("native", "sdk") if i % 2 == 0 else ("sdk", "native")):
                if side == "native":
                    wall, ids, failed = await native_batch(c)
                    native_walls.append(wall)
                    await asyncio.gather(*(c.kill_sandbox(sid) for sid in ids))
                else:
                    wall, each, sandboxes, failed = await sdk_concurrent()
                    sdk_walls.append(wall)
                    sdk_each.extend(each)
                    await asyncio.gather(*(s.kill() for s in sandboxes))
                failures[side] += failed
    native_p50 = summary_ms(native_walls)["p50_ms"]
    sdk_p50 = summary_ms(sdk_walls)["p50_ms"]
    return {
        "native_batch_wall": summary_ms(native_walls),
        "sdk_concurrent_wall": summary_ms(sdk_walls),
        "sdk_each_create": summary_ms(sdk_each),
        "failed_creates": failures,
        "errors": dict(ERRORS),
        "ratio_p50_native_over_sdk": round(native_p50 / sdk_p50, 3),
    }


async def main() -> None:
    async with running_platform("abenb", free_subnet(20)) as plat:
        result = await rounds(plat)
    emit("batch_create", {"rounds": ROUNDS, "sandboxes_per_side": N, **result})


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    asyncio.run(main())
