"""The client for synchronous code: the same calls, each run to its end on a private event loop
(one per client, so its one channel lives there). Streams are whole here: `run` instead of
`exec` (a process to its end, its input given at once), `get_file` instead of `file_chunks`.
Not for use inside a running event loop: use GatewayClient there."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from aenv_client.client import GatewayClient

P = ParamSpec("P")
R = TypeVar("R")


def _blocking(
    method: Callable[Concatenate[GatewayClient, P], Awaitable[R]],
) -> Callable[Concatenate[SyncGatewayClient, P], R]:
    def run(self: SyncGatewayClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._runner.run(method(self._client, *args, **kwargs))  # type: ignore[arg-type]

    run.__name__ = method.__name__
    run.__doc__ = method.__doc__
    return run


class SyncGatewayClient:
    def __init__(self, target: str, api_key: str, **options: Any) -> None:
        self._runner = asyncio.Runner()
        self._client = self._runner.run(_open(target, api_key, options))

    def __enter__(self) -> SyncGatewayClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._runner.run(self._client.close())
        finally:
            self._runner.close()

    create_sandbox = _blocking(GatewayClient.create_sandbox)
    create_sandboxes = _blocking(GatewayClient.create_sandboxes)
    get_sandbox = _blocking(GatewayClient.get_sandbox)
    list_sandboxes = _blocking(GatewayClient.list_sandboxes)
    list_sandboxes_page = _blocking(GatewayClient.list_sandboxes_page)
    kill_sandbox = _blocking(GatewayClient.kill_sandbox)
    pause_sandbox = _blocking(GatewayClient.pause_sandbox)
    resume_sandbox = _blocking(GatewayClient.resume_sandbox)
    set_timeout = _blocking(GatewayClient.set_timeout)
    sandbox_metrics = _blocking(GatewayClient.sandbox_metrics)
    create_snapshot = _blocking(GatewayClient.create_snapshot)
    list_snapshots = _blocking(GatewayClient.list_snapshots)
    delete_snapshot = _blocking(GatewayClient.delete_snapshot)
    fork_sandbox = _blocking(GatewayClient.fork_sandbox)
    reset_sandbox = _blocking(GatewayClient.reset_sandbox)
    run = _blocking(GatewayClient.run)
    put_file = _blocking(GatewayClient.put_file)
    get_file = _blocking(GatewayClient.get_file)
    # Leases (a sync caller renews its own: there is no background loop to do it).
    renew_lease = _blocking(GatewayClient.renew_lease)
    get_lease = _blocking(GatewayClient.get_lease)
    list_leases = _blocking(GatewayClient.list_leases)
    release_lease = _blocking(GatewayClient.release_lease)
    kill_sandboxes = _blocking(GatewayClient.kill_sandboxes)
    pause_sandboxes = _blocking(GatewayClient.pause_sandboxes)


async def _open(target: str, api_key: str, options: dict[str, Any]) -> GatewayClient:
    """Made on the runner's loop: the channel belongs to the loop it is made on."""
    return GatewayClient(target, api_key, **options)
