"""A client of the OCI distribution API (v2): manifests and blobs, through mirrors, with auth.

Three requests are all a pull needs:

    GET /v2/                                 is this a v2 registry, and how does it authenticate
    GET /v2/<repository>/manifests/<ref>     an index or manifest (Accept: the types we read)
    GET /v2/<repository>/blobs/<digest>      a config or layer (often a redirect to storage)

Each request goes to the registry's endpoints in order (`reference.RegistryHosts`: its mirrors,
then the upstream); an endpoint that fails in any way passes the request on to the next one, and
the last one's failure is the one raised. A 401 is answered once or twice through
`auth.Authorizer` (basic credentials, or a bearer token for the request's scope) and the request
is resent. Redirects are followed by hand so that the `Authorization` header is never sent to
another origin (blob storage behind a redirect uses its own signed URL and rejects it).

Nothing here trusts a byte it was given: manifests fetched by digest are hashed, blobs are
written through `blobs.BlobCache`, which verifies size and digest before keeping them.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from urllib.parse import urljoin, urlsplit

import aiohttp

from aenv_common.errors import AenvError

from .auth import Authorizer, Credentials
from .blobs import sha256_digest
from .errors import ImageNotFound, LayerCorrupt, RegistryAuthFailed, RegistryUnavailable
from .manifest import ACCEPT, MAX_DOCUMENT_BYTES, Descriptor
from .reference import Endpoint, ImageReference, RegistryHosts

log = logging.getLogger(__name__)

_REDIRECTS = (301, 302, 303, 307, 308)
_MAX_REDIRECTS = 5
_AUTH_ROUNDS = 3  # anonymous, then with what the challenge asked for, then once renewed
_CHUNK = 1 << 20
TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=15, sock_read=120)


def new_session() -> aiohttp.ClientSession:
    """A session for registries: no transparent decompression (blob bytes are hashed as sent)."""
    return aiohttp.ClientSession(timeout=TIMEOUT, auto_decompress=False)


class RegistryClient:
    def __init__(
        self, session: aiohttp.ClientSession, hosts: RegistryHosts, credentials: Credentials
    ) -> None:
        self._session = session
        self._hosts = hosts
        self._auth = Authorizer(session, credentials)

    async def ping(self, registry: str) -> None:
        """`GET /v2/` on the registry's endpoints: raises unless one answers as a v2 API."""
        probe = ImageReference(registry, "")
        async with self._get(probe, "/", {}):
            pass

    async def manifest(self, ref: ImageReference, reference: str) -> tuple[bytes, str, str]:
        """(body, Content-Type, digest) of the manifest or index `reference` names."""
        path = f"/{ref.repository}/manifests/{reference}"
        async with self._get(ref, path, {"Accept": ACCEPT}) as resp:
            body = await resp.content.read(MAX_DOCUMENT_BYTES + 1)
            content_type = resp.headers.get("Content-Type", "")
        digest = sha256_digest(body)
        if reference.startswith("sha256:") and digest != reference:
            raise LayerCorrupt(reference, f"manifest hashes to {digest}")
        return body, content_type, digest

    async def blob_bytes(self, ref: ImageReference, desc: Descriptor) -> bytes:
        """A small blob (a config) in memory, verified."""
        data = b"".join([chunk async for chunk in self.blob_chunks(ref, desc)()])
        if len(data) != desc.size or sha256_digest(data) != desc.digest:
            raise LayerCorrupt(desc.digest, f"config blob hashes to {sha256_digest(data)}")
        return data

    def blob_chunks(
        self, ref: ImageReference, desc: Descriptor
    ) -> Callable[[], AsyncIterator[bytes]]:
        """A function streaming the blob's bytes (for `BlobCache.fetch`, which verifies them)."""

        async def chunks() -> AsyncIterator[bytes]:
            async with self._get(ref, f"/{ref.repository}/blobs/{desc.digest}", {}) as resp:
                async for chunk in resp.content.iter_chunked(_CHUNK):
                    yield chunk

        return chunks

    @contextlib.asynccontextmanager
    async def _get(
        self, ref: ImageReference, path: str, headers: dict[str, str]
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        endpoints = self._hosts.endpoints(ref.registry)
        resp: aiohttp.ClientResponse | None = None
        for number, endpoint in enumerate(endpoints, 1):
            try:
                resp = await self._open(ref, endpoint, path, headers)
                break
            except AenvError as err:
                if number == len(endpoints):
                    raise
                log.info("registry endpoint failed, trying the next",
                         extra={"endpoint": endpoint.base_url, "error": err.message})
        assert resp is not None
        try:
            yield resp
        except aiohttp.ClientError as err:  # the body broke off mid-stream
            raise RegistryUnavailable(ref.registry, _describe(err)) from None
        finally:
            resp.release()

    async def _open(
        self, ref: ImageReference, endpoint: Endpoint, path: str, headers: dict[str, str]
    ) -> aiohttp.ClientResponse:
        """A 200 response of one endpoint, authorizing as its challenges ask; else a typed error."""
        url = endpoint.base_url + path
        params = {"ns": ref.registry} if endpoint.mirror else {}
        scope = f"repository:{ref.repository}:pull" if ref.repository else ""
        for attempt in range(_AUTH_ROUNDS):
            sent = {**headers, **self._auth.headers(endpoint.host, scope)}
            resp = await self._follow(url, params, sent, endpoint)
            if resp.status != 401 or attempt == _AUTH_ROUNDS - 1:
                break
            challenge = resp.headers.get("WWW-Authenticate", "")
            resp.release()
            await self._auth.answer(endpoint.host, ref.registry, challenge, scope)
        if resp.status == 200:
            return resp
        try:
            detail = _error_detail(await resp.content.read(4096))
        except aiohttp.ClientError:
            detail = ""
        finally:
            resp.release()
        anonymous = self._auth.login(endpoint.host, ref.registry) is None
        raise _status_error(ref, endpoint, path, resp.status, detail, anonymous)

    async def _follow(
        self, url: str, params: dict[str, str], headers: dict[str, str], endpoint: Endpoint
    ) -> aiohttp.ClientResponse:
        origin = _origin(url)
        for _ in range(_MAX_REDIRECTS + 1):
            try:
                resp = await self._session.get(
                    url, params=params, headers=headers, allow_redirects=False
                )
            except (aiohttp.ClientError, TimeoutError) as err:
                raise RegistryUnavailable(endpoint.host, _describe(err)) from None
            if resp.status not in _REDIRECTS or "Location" not in resp.headers:
                return resp
            url, params = urljoin(str(resp.url), resp.headers["Location"]), {}
            resp.release()
            if _origin(url) != origin:
                headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        raise RegistryUnavailable(endpoint.host, f"more than {_MAX_REDIRECTS} redirects")


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc


def _describe(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return f"{type(err).__name__}: {text}"[:300]


def _error_detail(body: bytes) -> str:
    """The registry's own words (`{"errors": [{"code", "message"}]}`), short."""
    try:
        errors = json.loads(body).get("errors") or []
        return "; ".join(f"{e.get('code', '')} {e.get('message', '')}".strip()
                         for e in errors[:2])[:200]
    except (ValueError, AttributeError, TypeError):
        return ""


def _status_error(
    ref: ImageReference, endpoint: Endpoint, path: str, status: int, detail: str,
    anonymous: bool,
) -> AenvError:
    if status == 404:
        what = "blob missing" if "/blobs/" in path else "manifest unknown"
        return ImageNotFound(str(ref), f"{endpoint.host}: {detail or what}")
    if status in (401, 403) and anonymous:
        # Docker Hub answers so for a repository that does not exist, too.
        return RegistryAuthFailed(endpoint.host, f"pull access denied for {ref.repository}: "
                                  "it does not exist or needs credentials")
    if status in (401, 403):
        return RegistryAuthFailed(endpoint.host, f"HTTP {status} for {ref.repository or '/v2/'}"
                                  + (f" ({detail})" if detail else ""))
    if status == 429:
        return RegistryUnavailable(endpoint.host, "too many requests (rate limited); retry later")
    return RegistryUnavailable(endpoint.host, f"HTTP {status}" + (f" ({detail})" if detail else ""))
