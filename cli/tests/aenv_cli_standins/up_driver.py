"""`python -m aenv_cli_standins.up_driver HOME`: what `aenv up --home HOME` does (the same
`run_platform`), with the stand-in services and free ports."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from aenv_cli_testkit import STANDIN_COMMANDS, standin_env
from rich.console import Console

from aenv_cli.platform import Platform
from aenv_cli.up import run_platform
from aenv_testing.platform_ports import free_platform_ports


def main(home: Path) -> int:
    platform = Platform(
        home, free_platform_ports(), commands=STANDIN_COMMANDS, base_env=standin_env()
    )
    return asyncio.run(run_platform(platform, Console(width=120)))


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
