"""The HTTP edge, as E2B's code-interpreter server answers its SDK: `/health`, `/execute`
(NDJSON, outputs.py) and `/contexts`. Errors (errors.py) become their status here, as text.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from . import outputs
from .contexts import DEFAULT_CWD, Context, Contexts, parse_env_vars
from .envs import EnvdEnvs, EnvSource
from .errors import BadRequest, InterpreterError

log = logging.getLogger(__name__)

KEEPALIVE_S = 5.0
Handler = Callable[[Request], Awaitable[Response]]


def build_app(envs: EnvSource | None = None, default_cwd: str = DEFAULT_CWD) -> Starlette:
    contexts = Contexts(envs or EnvdEnvs(), default_cwd)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        starting = asyncio.create_task(contexts.start_defaults())
        try:
            yield
        finally:
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError, InterpreterError):
                await starting
            await contexts.stop()

    routes = _Routes(contexts)
    return Starlette(lifespan=lifespan, routes=[
        Route("/health", routes.health, methods=["GET"]),
        Route("/execute", _edge(routes.execute), methods=["POST"]),
        Route("/contexts", _edge(routes.create), methods=["POST"]),
        Route("/contexts", _edge(routes.list), methods=["GET"]),
        Route("/contexts/{context_id}", _edge(routes.remove), methods=["DELETE"]),
        Route("/contexts/{context_id}/restart", _edge(routes.restart), methods=["POST"]),
    ])


def _edge(handler: Handler) -> Handler:
    async def handle(request: Request) -> Response:
        try:
            return await handler(request)
        except InterpreterError as err:
            return PlainTextResponse(err.message, status_code=err.status)
    return handle


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        body = json.loads(raw) if raw.strip() else {}
    except ValueError as err:
        raise BadRequest(f"the body is not JSON: {err}") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def _optional_str(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"{name} must be a string")
    return value or None


class _Routes:
    def __init__(self, contexts: Contexts) -> None:
        self._contexts = contexts

    async def health(self, request: Request) -> Response:
        if not self._contexts.ready:
            return PlainTextResponse("starting", status_code=503)
        return PlainTextResponse("OK")

    async def execute(self, request: Request) -> Response:
        body = await _body(request)
        code = body.get("code")
        if not isinstance(code, str):
            raise BadRequest("code must be a string")
        context_id, language = _optional_str(body, "context_id"), _optional_str(body, "language")
        if context_id and language:
            raise BadRequest("Only one of context_id or language can be provided")
        try:
            env_vars = parse_env_vars(body.get("env_vars"))
        except TypeError as err:
            raise BadRequest(str(err)) from None
        context = (self._contexts.get(context_id) if context_id
                   else await self._contexts.default(language))
        token = request.headers.get("x-access-token")
        return StreamingResponse(self._stream(context, code, env_vars, token),
                                 media_type="application/x-ndjson")

    async def _stream(self, context: Context, code: str, env_vars: dict[str, str],
                      token: str | None) -> AsyncIterator[bytes]:
        """The cell's outputs as they come, a keepalive line in every quiet KEEPALIVE_S, then
        its end. Closing the stream early (the client went away) interrupts the cell."""
        queue: asyncio.Queue[outputs.Output] = asyncio.Queue()
        running = asyncio.create_task(
            context.run(code, env_vars, token, self._contexts.envs, queue))
        try:
            while True:
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, running}, timeout=KEEPALIVE_S,
                                             return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield outputs.line(getter.result())
                    continue
                getter.cancel()
                if running in done:
                    break
                yield outputs.line(outputs.KEEPALIVE)
            while not queue.empty():
                yield outputs.line(queue.get_nowait())
            if (failure := running.exception()) is not None:
                log.warning("execution failed", extra={"context": context.id,
                                                       "error": str(failure)})
                yield outputs.line(outputs.error(type(failure).__name__, str(failure), ""))
            yield outputs.line(outputs.END)
        finally:
            if not running.done():
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await running

    async def create(self, request: Request) -> Response:
        body = await _body(request)
        context = await self._contexts.create(_optional_str(body, "language"),
                                              _optional_str(body, "cwd"))
        return JSONResponse(context.describe())

    async def list(self, request: Request) -> Response:
        return JSONResponse([context.describe() for context in self._contexts.all()])

    async def remove(self, request: Request) -> Response:
        await self._contexts.remove(request.path_params["context_id"])
        return Response(status_code=204)

    async def restart(self, request: Request) -> Response:
        await self._contexts.get(request.path_params["context_id"]).restart()
        return Response(status_code=204)
