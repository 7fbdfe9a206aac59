"""Batch create: N sandboxes in one call, each created as a single create is (scheduler
placement, the node agent, the retries of creates.py), concurrently; one result per sandbox, so
one bad item (an unknown template, no room) never fails the others.

A batch's idempotency key names each item (`<key>/<i>`, a name no client key can be: keys are
[a-z0-9-]), so the same call sent again returns the sandboxes already made and tries again only
the items that failed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, Internal, InvalidArgument
from aenv_common.limits import MAX_BATCH_CREATE
from aenv_gateway.core.sandboxes import CreateRequest

log = logging.getLogger(__name__)

# One item's outcome: its sandbox, or the error its create alone would have raised.
BatchResult = cluster_pb2.SandboxRecord | AenvError


def batch_size(count: int, items: int) -> int:
    """N of a batch asking for `count` alike sandboxes or `items` specs (the other one 0).

    :raise InvalidArgument: both given, or N out of 1..MAX_BATCH_CREATE.
    """
    if count and items:
        raise InvalidArgument("give count or items, not both")
    size = items or count or 1
    if size > MAX_BATCH_CREATE:
        raise InvalidArgument(f"a batch creates between 1 and {MAX_BATCH_CREATE} sandboxes")
    return size


class Creates(Protocol):
    """What a batch needs of SandboxService."""

    def check_create(self, request: CreateRequest) -> None: ...

    async def create(self, request: CreateRequest) -> cluster_pb2.SandboxRecord: ...


class BatchCreates:
    def __init__(self, service: Creates) -> None:
        self._service = service

    async def create(
        self, requests: Sequence[CreateRequest], idempotency_key: str | None
    ) -> list[BatchResult]:
        """One result per request, in order.

        `idempotency_key` is one the edge checked (`idempotency.checked_key`).

        :raise InvalidArgument: no requests, too many, or a malformed item (no template, a
            timeout out of range): the whole batch, before any create.
        """
        batch_size(0, len(requests))
        for i, request in enumerate(requests):
            try:
                self._service.check_create(request)
            except InvalidArgument as err:
                raise InvalidArgument(f"item {i}: {err.message}") from None
        keyed = [replace(r, idempotency_key=f"{idempotency_key}/{i}" if idempotency_key else None)
                 for i, r in enumerate(requests)]
        # Cancelled (the caller went away): every item's create is cancelled with it, and
        # creates.py kills whatever a node may have made.
        return list(await asyncio.gather(*(self._one(r) for r in keyed)))

    async def _one(self, request: CreateRequest) -> BatchResult:
        try:
            return await self._service.create(request)
        except AenvError as err:
            return err
        except Exception:
            # A bug for this item only: the others' sandboxes are still answered.
            log.exception("batch item failed", extra={"template_id": request.template_id})
            return Internal("the create failed")
