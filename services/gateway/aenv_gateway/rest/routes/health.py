"""Unauthenticated liveness, Prometheus metrics and the OpenAPI document."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aenv_common.metrics import CONTENT_TYPE, exposition


async def health(_: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def metrics(_: Request) -> Response:
    return Response(exposition(), headers={"Content-Type": CONTENT_TYPE})


@cache
def openapi_document() -> dict[str, Any]:
    text = resources.files("aenv_gateway.rest").joinpath("openapi.json").read_text(encoding="utf-8")
    document: dict[str, Any] = json.loads(text)
    return document


async def openapi(_: Request) -> Response:
    return JSONResponse(openapi_document())


def routes() -> list[Route]:
    return [
        Route("/health", health, methods=["GET"]),
        # A request naming a sandbox is that sandbox's envd's /metrics (app.py AMBIGUOUS_PATHS).
        Route("/metrics", metrics, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
    ]
