"""What every language's kernel offers a context: run code (its outputs put on a queue as they
come), run setup code quietly, interrupt, restart, stop, and the code that sets variables.

Jupyter kernels (Python, R) are in jupyter.py; JavaScript runs in a Node.js process
(node.py); bash in a bash process (bash.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Protocol

from .outputs import Output

OutputQueue = asyncio.Queue[Output]


class Kernel(Protocol):
    language: str

    async def start(self) -> None:
        """:raise KernelFailed: it did not start."""

    async def execute(self, code: str, outputs: OutputQueue) -> None:
        """Runs `code`, putting its outputs on `outputs`; returns when it has finished."""

    async def quietly(self, code: str) -> None:
        """Runs setup code (variables, seeds) without outputs or an execution count."""

    async def interrupt(self) -> None:
        """Stops what is running; the kernel and its state stay."""

    async def restart(self) -> None:
        """A fresh kernel: its state is gone, its cwd the same."""

    async def stop(self) -> None: ...

    def env_code(self, values: Mapping[str, str], removed: Sequence[str]) -> str:
        """Code that sets `values` and removes `removed` from its environment."""

    def reseed_code(self) -> str:
        """Code that reseeds the language's own random generators (a clone copied their state)."""
