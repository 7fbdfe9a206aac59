"""The node's volume relays, one per slot whose sandbox mounts volumes.

The restore pipeline starts a sandbox's relay once it has its slot and before its guest runs
(every way a guest comes to run: create, cold boot, resume, fork child, take-over's resume, reset),
with its stop on the pipeline's undo stack; the network manager stops it when the slot is
destroyed (kill, pause's release, a failed reset), before the netns goes, as a listener would
otherwise keep the netns alive. A restarted agent starts them again for the sandboxes it adopted,
from their records (restart/recovery.py): the old relay died with the old agent, and each guest's
NFS client dials again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Internal

from .config import RelaySettings
from .endpoint import VolumeEndpoint
from .listener import OpenListener, open_in_netns
from .mounts import check_mounts, preamble
from .relay import SlotRelay

log = logging.getLogger(__name__)


class VolumeRelays:
    def __init__(self, endpoint: VolumeEndpoint, settings: RelaySettings | None = None,
                 open_listener: OpenListener = open_in_netns) -> None:
        self._endpoint = endpoint
        self._settings = settings or RelaySettings()
        self._open = open_listener
        self._relays: dict[str, SlotRelay] = {}

    @property
    def endpoint(self) -> VolumeEndpoint:
        return self._endpoint

    def running(self) -> dict[str, SlotRelay]:
        """The relays by netns (a copy)."""
        return dict(self._relays)

    async def start(self, netns: str, mounts: Sequence[cluster_pb2.VolumeMount]) -> None:
        """The relay of a sandbox about to run in ``netns`` (none without mounts). The volume
        server's address is known before it returns, so a create fails here, not in its guest's
        mount. A slot's relay running already (a reset keeps its slot) takes the new tickets for
        its next connections.

        :raise InvalidArgument: a mount no relay can serve. :raise Conflict: no snapstore.
        :raise AenvError: snapstore did not say where the volume server is; the listener failed.
        """
        if not mounts:
            return
        check_mounts(mounts)
        await self._endpoint.address()
        await self._listen(netns, preamble(mounts))

    async def resume(self, netns: str, mounts: Sequence[cluster_pb2.VolumeMount]) -> None:
        """``start`` for a guest already running (adopted after an agent restart): the listener
        only, the volume server asked by its first connection (snapstore may be down now).

        :raise AenvError: as ``start``.
        """
        if mounts:
            check_mounts(mounts)
            await self._listen(netns, preamble(mounts))

    async def stop(self, netns: str) -> None:
        """Stop the slot's relay, closing its connections; nothing when it has none."""
        relay = self._relays.pop(netns, None)
        if relay is not None:
            await relay.stop()
            log.info("volume relay stopped", extra={"netns": netns})

    async def close(self) -> None:
        """Every relay (the agent stops) and the endpoint's channel."""
        for netns in list(self._relays):
            await self.stop(netns)
        await self._endpoint.close()

    async def _listen(self, netns: str, tickets: bytes) -> None:
        if (relay := self._relays.get(netns)) is not None:
            relay.preamble = tickets
            return
        try:
            listener = await self._open(netns, self._settings.backlog)
        except OSError as err:
            raise Internal(f"the volume relay of {netns} cannot listen: {err}") from err
        if netns in self._relays:  # started meanwhile (never by the same sandbox)
            listener.close()
            self._relays[netns].preamble = tickets
            return
        self._relays[netns] = SlotRelay(netns, listener, tickets, self._endpoint,
                                        self._settings)
        log.info("volume relay started", extra={"netns": netns})
