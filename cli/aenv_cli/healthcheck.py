"""`python -m aenv_cli.healthcheck HOST:PORT`: exit 0 when the gRPC server there reports SERVING
(grpc.health.v1). For container health checks (compose) and scripts."""

from __future__ import annotations

import asyncio
import sys

from aenv_cli.readiness import GrpcHealthProbe


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m aenv_cli.healthcheck HOST:PORT", file=sys.stderr)
        return 2
    return 0 if asyncio.run(GrpcHealthProbe(argv[0]).ready()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
