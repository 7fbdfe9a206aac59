"""The wing's console logs: each sandbox's (running or paused) read from its directory's
`console.log` into the kept entries (sandbox/logs.py), for queries and for why a guest died."""

from __future__ import annotations

from pathlib import Path

from aenv_nodeagent.sandbox.context import WingContext
from aenv_nodeagent.sandbox.logs import CONSOLE_LOG, ConsoleLogs, LogEntry, LogQuery
from aenv_nodeagent.sandbox.model import Sandbox

# How much of a guest's console its death is read from.
CONSOLE_TAIL_LINES = 400


class SandboxLogs:
    """Collects this node's guests' consoles and answers queries of them."""

    def __init__(self, wing: WingContext) -> None:
        self._registry = wing.registry
        self.console = ConsoleLogs()

    def read(self, sandbox_id: str, query: LogQuery) -> list[LogEntry]:
        """The sandbox's console lines in the query's window, read up to now.

        :raise NotFound: no such sandbox, running or paused.
        """
        paused = self._registry.paused(sandbox_id)
        directory = paused.directory if paused else self._registry.get(sandbox_id).directory
        self.console.collect(sandbox_id, directory / CONSOLE_LOG)
        return self.console.query(sandbox_id, query)

    async def run(self, interval_s: float = 0.5) -> None:
        await self.console.run(self._consoles, self._keeps_logs, interval_s)

    def tail(self, sandbox: Sandbox) -> list[str]:
        """The last lines of the guest's console, read up to now, oldest first: what tells why
        a guest ended itself (sandbox/death_causes.py)."""
        self.console.collect(sandbox.sandbox_id, sandbox.directory / CONSOLE_LOG)
        entries = self.console.query(
            sandbox.sandbox_id, LogQuery(limit=CONSOLE_TAIL_LINES, backward=True))
        return [entry.line for entry in reversed(entries)]

    def _consoles(self) -> list[tuple[str, Path]]:
        registry = self._registry
        return [(sbx.sandbox_id, sbx.directory / CONSOLE_LOG) for sbx in registry.all()] + [
            (p.record.sandbox_id, p.directory / CONSOLE_LOG) for p in registry.all_paused()]

    def _keeps_logs(self, sandbox_id: str) -> bool:
        return self._registry.has(sandbox_id) or self._registry.is_busy(sandbox_id)
