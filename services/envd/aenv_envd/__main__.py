"""`python -m aenv_envd [--host H] [--port P]`: serve envd with uvicorn."""

from __future__ import annotations

import logging
import sys

from .config import load_config

# glibc mallopt parameters: streams and uploads allocate and free MiB-sized buffers back to back.
# By default each is a fresh mmap (or heap top that gets trimmed), so every 4 KiB page faults
# anew, which under TCG costs as much as the copy itself. Keep them in the heap instead.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_BYTES = 4 * 1024 * 1024
_TRIM_THRESHOLD_BYTES = 16 * 1024 * 1024


def _reuse_big_buffers() -> None:
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
        libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)
    except (OSError, AttributeError):  # not glibc: its allocator's defaults it is
        pass


def main(argv: list[str] | None = None) -> None:
    config = load_config(argv)
    logging.basicConfig(
        level=config.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    import uvicorn  # imported after argument parsing: --help stays instant

    _reuse_big_buffers()

    from .app import build_app
    from .quiet_server import QuietServer

    # asyncio's selector transports set TCP_NODELAY on accepted sockets (no Nagle delay).
    server_config = uvicorn.Config(
        build_app(config),
        host=config.host,
        port=config.port,
        loop="asyncio",
        # httptools (a dependency) when importable, else h11: h11 parses and frames every body
        # chunk in Python, which under TCG costs about as much as the guest's network stack.
        http="auto",
        lifespan="off",
        access_log=False,
        log_config=None,
        server_header=False,
        date_header=False,
        timeout_keep_alive=75,
    )
    QuietServer(server_config).run()


if __name__ == "__main__":
    main()
