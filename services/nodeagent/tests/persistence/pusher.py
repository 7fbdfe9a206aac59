"""Stands in for a node agent pushing a snapshot: `python pusher.py <snapstore> <id> <file>`
pushes the file as manifest <id> with the node agent's push code, then exits."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from pathlib import Path

from aenv_nodeagent.snapshots.persistence import SnapshotPersistence


async def push(address: str, manifest_id: str, memory: Path) -> None:
    persistence = SnapshotPersistence(address, retry_delays_s=())

    async def files() -> Mapping[str, Path]:
        return {"memory": memory}

    async def pushed() -> None:
        return None

    persistence.push_soon(manifest_id, files, pushed, labels={})
    await persistence.persisted(manifest_id)
    await persistence.close()


if __name__ == "__main__":
    asyncio.run(push(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
