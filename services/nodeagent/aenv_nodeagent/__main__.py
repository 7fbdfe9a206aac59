"""`python -m aenv_nodeagent`: run the node agent until SIGINT/SIGTERM.

`python -m aenv_nodeagent cleanup`: stop what a node agent that is gone left running on this node
(restart/cleanup.py); `aenv up` runs it when the node agent could not stop by itself."""

from __future__ import annotations

import asyncio
import sys

from aenv_common.logging import setup_logging
from aenv_common.service_main import Service, run_service
from aenv_nodeagent.config import NodeAgentSettings


def main() -> None:
    settings = NodeAgentSettings()
    if sys.argv[1:] == ["cleanup"]:
        from aenv_nodeagent.restart.cleanup import clean_up

        setup_logging("nodeagent", settings.common.log_level, settings.common.log_json)
        asyncio.run(clean_up(settings))
        return

    def build() -> Service:
        from aenv_nodeagent.server import NodeAgent

        return NodeAgent(settings)

    run_service("nodeagent", settings.common, build)


if __name__ == "__main__":
    main()
