"""`python -m aenv_nodeagent`: run the node agent until SIGINT/SIGTERM."""

from __future__ import annotations

from aenv_common.service_main import Service, run_service
from aenv_nodeagent.config import NodeAgentSettings


def main() -> None:
    settings = NodeAgentSettings()

    def build() -> Service:
        from aenv_nodeagent.node import NodeAgent

        return NodeAgent(settings)

    run_service("nodeagent", settings.common, build)


if __name__ == "__main__":
    main()
