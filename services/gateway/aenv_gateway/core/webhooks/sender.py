"""One delivery attempt: a POST of the signed body to the webhook's URL.

The request goes only where the target policy allows (checked here, and again by the
connector's resolver for the addresses it connects to), within `timeout_s`, and is never
redirected: a 3xx is a failed attempt like any other non-2xx, so a receiver cannot bounce the
gateway to an address the policy would refuse. No proxy from the environment is used. The
receiver's body is read only to end the exchange; nothing of it is kept.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import aiohttp

from aenv_gateway.core.webhooks import payload
from aenv_gateway.core.webhooks.targets import TargetPolicy, TargetRefused, connector

# What a receiver's answer may be read to (it is thrown away).
_DRAIN_BYTES = 64 * 1024


@dataclass(frozen=True)
class Attempt:
    """How one attempt went: the HTTP status (0: no answer) and why it failed, if it did."""

    status: int
    error: str
    seconds: float

    @property
    def delivered(self) -> bool:
        return 200 <= self.status < 300


class Sender:
    def __init__(self, policy: TargetPolicy, timeout_s: float) -> None:
        self._policy = policy
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=connector(self._policy), timeout=self._timeout, trust_env=False,
                auto_decompress=False)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(self, webhook_id: str, url: str, secret: str, body: bytes) -> Attempt:
        started = time.perf_counter()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "aenv-webhooks/1",
            "e2b-webhook-id": webhook_id,
            "e2b-delivery-id": str(uuid.uuid4()),
            "e2b-signature-version": payload.SIGNATURE_VERSION,
            "e2b-signature": payload.signature(secret, body),
        }
        try:
            await self._policy.check(url)
            async with self._client().post(url, data=body, headers=headers,
                                           allow_redirects=False) as response:
                await response.content.read(_DRAIN_BYTES)
                status = response.status
        except TargetRefused as err:
            return Attempt(0, err.message, time.perf_counter() - started)
        except TimeoutError:
            return Attempt(0, "the receiver did not answer in time",
                           time.perf_counter() - started)
        except aiohttp.ClientError as err:
            return Attempt(0, _words(err), time.perf_counter() - started)
        seconds = time.perf_counter() - started
        return Attempt(status, "" if 200 <= status < 300 else f"HTTP {status}", seconds)


def _words(err: aiohttp.ClientError) -> str:
    """What went wrong, without the URL (it may carry a receiver's token)."""
    if isinstance(err, aiohttp.ClientConnectorError):
        return f"could not connect: {err.os_error.strerror or err.os_error}"
    return type(err).__name__
