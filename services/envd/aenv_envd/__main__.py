"""`python -m aenv_envd [--host H] [--port P]`: serve envd with uvicorn."""

from __future__ import annotations

import logging
import sys

from .config import load_config


def main(argv: list[str] | None = None) -> None:
    config = load_config(argv)
    logging.basicConfig(
        level=config.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    import uvicorn  # imported after argument parsing: --help stays instant

    from .app import build_app

    # asyncio's selector transports set TCP_NODELAY on accepted sockets (no Nagle delay).
    uvicorn.run(
        build_app(config),
        host=config.host,
        port=config.port,
        loop="asyncio",
        http="h11",
        lifespan="off",
        access_log=False,
        log_config=None,
        server_header=False,
        date_header=False,
        timeout_keep_alive=75,
    )


if __name__ == "__main__":
    main()
