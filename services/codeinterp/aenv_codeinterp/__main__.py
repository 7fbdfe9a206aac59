"""`python3 -m aenv_codeinterp [--host H] [--port P]`: serve the code interpreter with uvicorn.

Started by `code-interpreter-v1`'s start command on the guest's own Python; it logs JSON lines
to stderr (never code or variable values: they may hold secrets).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from .envs import ENVD_PORT, INIT_MARKER  # standard library only: --help stays instant

PORT = 49999
_FIELDS = ("context", "language", "error", "contexts")


class _JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {"ts": round(record.created, 3), "level": record.levelname, "logger": record.name,
                "msg": record.getMessage()}
        line.update({k: getattr(record, k) for k in _FIELDS if hasattr(record, k)})
        return json.dumps(line, default=str)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="aenv_codeinterp")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=PORT)
    parser.add_argument("--cwd", default="/home/user", help="the default contexts' cwd")
    parser.add_argument("--envd-port", type=int, default=ENVD_PORT, help="the guest's envd")
    parser.add_argument("--envd-init-marker", default=INIT_MARKER,
                        help="the file envd replaces after each /init")
    args = parser.parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonLines())
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    import uvicorn  # after argument parsing: --help stays instant

    from .app import build_app
    from .envs import EnvdEnvs

    app = build_app(EnvdEnvs(port=args.envd_port, marker=args.envd_init_marker),
                    default_cwd=args.cwd)
    config = uvicorn.Config(app, host=args.host, port=args.port,
                            log_config=None, access_log=False, lifespan="on", http="h11",
                            timeout_keep_alive=75)
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
