"""A trainer that holds its sandboxes under an experiment lease (tests/e2e/test_leases.py runs it
as a process of its own and SIGKILLs it): it takes a lease, creates COUNT sandboxes under it in
batches at once (creating again, as a trainer would, the few an overloaded host failed) — or,
with `fork`, creates one and forks it into the rest (children inherit its lease) —, writes what
it made and what failed to OUT (atomically), then holds the lease, renewing it in the
background, until it is killed.

    python lease_trainer.py TARGET OUT COUNT TTL_S [fork]     (the API key in AENV_API_KEY)
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from aenv_client import AenvError, GatewayClient, Lease
from aenv_common.limits import MAX_FORK_CHILDREN

BATCH = 100  # the most one batch create makes
ROUNDS = 3


async def main(target: str, out: Path, count: int, ttl_s: int, fork: bool) -> None:
    async with GatewayClient(target, os.environ["AENV_API_KEY"], timeout_s=1800) as client:
        async with await client.create_lease(ttl_s, name="trainer") as lease:
            started = time.monotonic()
            made: list[str] = []
            errors: list[str] = []
            if fork:
                await forked(client, lease, count, made, errors)
            # As a trainer does: an item that failed (infrastructure, not its code) is created
            # again, a few rounds at most.
            for _ in range(ROUNDS):
                wanted = count - len(made)
                if not wanted:
                    break
                sizes = [min(BATCH, wanted - i) for i in range(0, wanted, BATCH)]
                batches = await asyncio.gather(*(
                    client.create_sandboxes("base", count=size, lease_id=lease.lease_id,
                                            metadata={"run": "lease-e2e"}, timeout_seconds=3600)
                    for size in sizes))
                outcomes = [o for batch in batches for o in batch]
                made += [o.sandbox_id for o in outcomes if not isinstance(o, AenvError)]
                errors += [o.message for o in outcomes if isinstance(o, AenvError)]
            took = time.monotonic() - started
            written = out.with_suffix(".tmp")
            written.write_text(json.dumps({"lease_id": lease.lease_id, "sandboxes": made,
                                           "errors": errors, "create_s": took}))
            written.rename(out)
            print(f"trainer: {len(made)} sandboxes in {took:.1f} s under {lease.lease_id}",
                  flush=True)
            await lease.lapsed.wait()  # only if the platform ended it: the test kills us first


async def forked(client: GatewayClient, lease: Lease, count: int, made: list[str],
                 errors: list[str]) -> None:
    """One sandbox under the lease, forked into the rest: the children restore from its frozen
    memory at once instead of each from the template through placement."""
    parent = await client.create_sandbox("base", lease_id=lease.lease_id,
                                         metadata={"run": "lease-e2e"}, timeout_seconds=3600)
    made.append(parent.sandbox_id)
    # One fork at a time: a fork holds its parent for its hidden snapshot.
    for first in range(1, count, MAX_FORK_CHILDREN):
        children = min(MAX_FORK_CHILDREN, count - first)
        outcomes = await client.fork_sandbox(parent.sandbox_id, children, timeout_seconds=3600)
        made += [o.sandbox_id for o in outcomes if not isinstance(o, AenvError)]
        errors += [o.message for o in outcomes if isinstance(o, AenvError)]


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
                     sys.argv[5:6] == ["fork"]))
