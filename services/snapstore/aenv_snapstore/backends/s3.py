"""Backend on any S3-compatible object store (AWS S3, MinIO, Ceph RGW, moto)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import AsyncExitStack, contextmanager
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from aenv_common.errors import NotFound, Unavailable
from aenv_snapstore.backends.base import ObjectInfo

_MISSING_CODES = {"404", "NoSuchKey", "NotFound"}


def _is_missing(err: ClientError) -> bool:
    return str(err.response.get("Error", {}).get("Code")) in _MISSING_CODES


@contextmanager
def _unavailable_on_failure(action: str, key: str) -> Iterator[None]:
    """S3 failures other than "not found" are the store being unreachable or refusing."""
    try:
        yield
    except (ClientError, BotoCoreError) as err:
        raise Unavailable(f"S3 {action} {key} failed: {err}") from err


class S3Backend:
    """Objects under `prefix` in `bucket`. Chunks are at most 2 MiB, so single PUTs suffice."""

    def __init__(self, client: Any, exit_stack: AsyncExitStack, bucket: str, prefix: str) -> None:
        self._client = client
        self._exit_stack = exit_stack
        self._bucket = bucket
        self._prefix = prefix

    @classmethod
    async def connect(
        cls,
        *,
        bucket: str,
        endpoint_url: str | None,
        region: str,
        access_key_id: str | None,
        secret_access_key: str | None,
        prefix: str = "",
        create_bucket: bool = False,
        max_connections: int = 32,
    ) -> S3Backend:
        stack = AsyncExitStack()
        client = await stack.enter_async_context(
            get_session().create_client(
                "s3",
                endpoint_url=endpoint_url,
                region_name=region,
                aws_access_key_id=access_key_id,
                aws_secret_access_key=secret_access_key,
                config=AioConfig(max_pool_connections=max_connections),
            )
        )
        backend = cls(client, stack, bucket, prefix)
        try:
            await backend._ensure_bucket(create_bucket)
        except BaseException:
            await stack.aclose()
            raise
        return backend

    async def _ensure_bucket(self, create: bool) -> None:
        try:
            await self._client.head_bucket(Bucket=self._bucket)
        except ClientError as err:
            if not (_is_missing(err) and create):
                raise Unavailable(f"S3 bucket {self._bucket} not usable: {err}") from err
            await self._client.create_bucket(Bucket=self._bucket)

    async def has(self, key: str) -> bool:
        with _unavailable_on_failure("HEAD", key):
            try:
                await self._client.head_object(Bucket=self._bucket, Key=self._prefix + key)
            except ClientError as err:
                if _is_missing(err):
                    return False
                raise
        return True

    async def put(self, key: str, data: bytes) -> None:
        with _unavailable_on_failure("PUT", key):
            await self._client.put_object(Bucket=self._bucket, Key=self._prefix + key, Body=data)

    async def get(self, key: str) -> bytes:
        with _unavailable_on_failure("GET", key):
            try:
                reply = await self._client.get_object(Bucket=self._bucket, Key=self._prefix + key)
            except ClientError as err:
                if _is_missing(err):
                    raise NotFound(f"object {key} not found") from None
                raise
            async with reply["Body"] as body:
                data: bytes = await body.read()
        return data

    async def delete(self, key: str) -> None:
        with _unavailable_on_failure("DELETE", key):
            await self._client.delete_object(Bucket=self._bucket, Key=self._prefix + key)

    async def list(self, prefix: str) -> AsyncIterator[ObjectInfo]:
        paginator = self._client.get_paginator("list_objects_v2")
        with _unavailable_on_failure("LIST", prefix):
            async for page in paginator.paginate(Bucket=self._bucket, Prefix=self._prefix + prefix):
                for obj in page.get("Contents", []):
                    key = obj["Key"][len(self._prefix) :]
                    yield ObjectInfo(key, int(obj["Size"]), obj["LastModified"].timestamp())

    async def flush(self, keys: Iterable[str]) -> None:
        return None  # an acknowledged S3 PUT is already durable

    async def close(self) -> None:
        await self._exit_stack.aclose()
