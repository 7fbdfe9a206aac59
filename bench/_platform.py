"""A whole single-node platform for a benchmark: in a temporary home, on the shared guest
artifact cache (no rebuild), with its own netns prefix and address pool."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from aenv_cli.platform import Platform
from aenv_testing.platform_ports import free_platform_ports


def artifact_cache() -> Path:
    home = Path(os.environ.get("AENV_HOME", Path.home() / ".aenv"))
    return Path(os.environ.get("AENV_NODEAGENT_CACHE_DIR", home / "cache"))


@contextlib.asynccontextmanager
async def running_platform(
    net_prefix: str, pool_cidr: str, *, own_templates: bool = False,
    env: dict[str, str] | None = None,
) -> AsyncIterator[Platform]:
    """With `own_templates`, the node keeps its templates and image layers in the temporary
    home (gone with it) instead of the shared cache: `base` is captured at start. `env`: more
    settings of the services."""
    with tempfile.TemporaryDirectory(prefix="aenv-bench-") as tmp:
        # No guest traffic forwarded off the machine unless `env` names destinations.
        base = dict(os.environ, AENV_NODEAGENT_CACHE_DIR=str(artifact_cache()),
                    AENV_NODEAGENT_NET_PREFIX=net_prefix, AENV_NODEAGENT_NET_POOL_CIDR=pool_cidr,
                    AENV_NODEAGENT_EGRESS_FORWARD_DESTINATIONS="[]") | (env or {})
        if own_templates:
            base.update(AENV_NODEAGENT_TEMPLATES_DIR=str(Path(tmp) / "node-templates"),
                        AENV_NODEAGENT_IMAGE_CACHE_DIR=str(Path(tmp) / "node-images"))
        plat = Platform(Path(tmp), free_platform_ports(), base_env=base)
        await plat.start()
        try:
            yield plat
        finally:
            await plat.stop()
