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
from aenv_gateway.rest.boundary import Access, route


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
        route("/health", health, "GET", Access.OPEN),
        # A request naming a sandbox is that sandbox's envd's /metrics (app.py AMBIGUOUS_PATHS).
        route("/metrics", metrics, "GET", Access.OPEN),
        route("/openapi.json", openapi, "GET", Access.OPEN),
    ]
