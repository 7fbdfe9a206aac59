"""What idempotency keys shared in etcd add to a create: a batch of 16 keyed creates through
`IdempotentCreates` over `EtcdKeyClaims` (claim, then keep the record: two transactions a key,
one lease per tenth of the TTL) beside the same batch over `InMemoryKeyClaims` (one gateway's
keys, the old way) and beside 16 raw etcd puts from the same client, in one run on a real etcd.
The creates themselves answer at once, so the figures are the keys' cost alone; a real create
under TCG takes seconds (bench/batch_create.py).

Run: python bench/idempotency_keys.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from _stats import emit, summary_ms

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import ClusterStore
from aenv_gateway.core.idempotency import IdempotentCreates, InMemoryKeyClaims, KeyClaims
from aenv_gateway.core.idempotency_etcd import EtcdKeyClaims
from aenv_testing.etcd import EtcdServer

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "200"))
N = 16


async def _made() -> cluster_pb2.SandboxRecord:
    return cluster_pb2.SandboxRecord(sandbox_id=uuid.uuid4().hex[:20])


async def _batch(claims: KeyClaims) -> Callable[[], Awaitable[float]]:
    runner = IdempotentCreates(claims)

    async def one() -> float:
        key = uuid.uuid4().hex
        t0 = time.perf_counter()
        await asyncio.gather(*(runner.run("admin", f"{key}/{i}", _made) for i in range(N)))
        return time.perf_counter() - t0

    return one


async def _raw_puts(store: ClusterStore) -> float:
    key = uuid.uuid4().hex
    t0 = time.perf_counter()
    await asyncio.gather(*(store.client.put(f"/bench-raw/{key}/{i}".encode(), b"x")
                           for i in range(N)))
    return time.perf_counter() - t0


async def main() -> None:
    with EtcdServer() as etcd:
        store = await ClusterStore.connect(etcd.settings(prefix="/aenv-bench/v1"))
        shared = EtcdKeyClaims(store, ttl_s=600)
        try:
            sides: dict[str, Callable[[], Awaitable[float]]] = {
                "etcd_keys": await _batch(shared), "memory_keys": await _batch(
                    InMemoryKeyClaims(600)), "raw_puts": lambda: _raw_puts(store)}
            samples: dict[str, list[float]] = {name: [] for name in sides}
            for i in range(ROUNDS):
                # Alternating order: neither side always runs on a warmer client.
                order = list(sides) if i % 2 else list(reversed(sides))
                for name in order:
                    samples[name].append(await sides[name]())
        finally:
            await shared.close()
            await store.close()
    etcd_p50 = summary_ms(samples["etcd_keys"])["p50_ms"]
    emit("idempotency_keys", {
        "rounds": ROUNDS, "keys_per_batch": N,
        **{f"batch_of_16_{k}": summary_ms(v) for k, v in samples.items()},
        "ratio_p50_etcd_keys_over_raw_puts": round(
            etcd_p50 / summary_ms(samples["raw_puts"])["p50_ms"], 2),
    })


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    asyncio.run(main())
