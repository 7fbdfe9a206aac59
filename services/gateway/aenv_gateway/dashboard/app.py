"""The dashboard's ASGI app, mounted at /dashboard by the composition root: login and logout,
each request's session (checked with its key again: a revoked key ends it), CSRF on every POST,
typed errors as pages with the HTTP table's status, the script served from the package."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route, Router

from aenv_common.errors import AenvError, NotFound
from aenv_common.status_tables import http_status
from aenv_gateway.dashboard.cluster_pages import ClusterPages
from aenv_gateway.dashboard.html import esc, page
from aenv_gateway.dashboard.parts import DashboardParts
from aenv_gateway.dashboard.sandbox_pages import SandboxPages
from aenv_gateway.dashboard.sessions import COOKIE, Session, SessionStore, cookie_header

log = logging.getLogger(__name__)

SCRIPT = (Path(__file__).parent / "static" / "dashboard.js").read_bytes()
MAX_FORM_BYTES = 4096
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; style-src 'unsafe-inline'; "
                               "img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
Handler = Callable[[Request, Session], Awaitable[Response]]


async def _form(request: Request) -> dict[str, str]:
    """An urlencoded form, bounded (the gateway ships no multipart parser)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return {}
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}


def _html(body: str, status: int = 200, cookie: str | None = None) -> HTMLResponse:
    response = HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)
    if cookie is not None:
        response.headers["Set-Cookie"] = cookie
    return response


def _see(path: str, cookie: str | None = None) -> RedirectResponse:
    response = RedirectResponse(path, status_code=303, headers=SECURITY_HEADERS)
    if cookie is not None:
        response.headers["Set-Cookie"] = cookie
    return response


class Dashboard:
    def __init__(self, parts: DashboardParts, sessions: SessionStore | None = None) -> None:
        self._parts = parts
        self.sessions = sessions or SessionStore(parts.session_ttl_s)
        self._sandboxes = SandboxPages(parts)
        self._cluster = ClusterPages(parts)
        self.app = Router(routes=self._routes())

    def _routes(self) -> list[Route]:
        sid = "/sandboxes/{sandbox_id}"
        return [
            Route("/", self.home, methods=["GET"]),
            Route("/login", self.login_form, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self._post(self.logout), methods=["POST"]),
            Route("/static/dashboard.js", self.script, methods=["GET"]),
            Route("/sandboxes", self._get(self.sandboxes), methods=["GET"]),
            Route("/sandboxes/rows", self._get(self.sandbox_rows), methods=["GET"]),
            Route(sid, self._get(self.sandbox), methods=["GET"]),
            Route(f"{sid}/kill", self._post(self.kill), methods=["POST"]),
            Route(f"{sid}/pause", self._post(self.pause), methods=["POST"]),
            Route(f"{sid}/resume", self._post(self.resume), methods=["POST"]),
            Route("/templates", self._get(self.templates), methods=["GET"]),
            Route("/templates/{template_id}", self._get(self.template), methods=["GET"]),
            Route("/nodes", self._get(self.nodes), methods=["GET"]),
            Route("/events", self._get(self.events), methods=["GET"]),
            Route("/events/stream", self._get(self.event_stream), methods=["GET"]),
        ]

    # Sessions ---------------------------------------------------------------------------

    def _session(self, request: Request) -> Session | None:
        """The request's session if its key still holds (the caller is set for the operations,
        as the API's boundary sets it); a revoked key's session is ended here."""
        session = self.sessions.get(request.cookies.get(COOKIE))
        if session is None:
            return None
        if self._parts.auth.identify(session.api_key) != session.key_id:
            self.sessions.close(session.session_id)
            return None
        self._parts.auth.check(session.api_key)
        return session

    def _guarded(self, handler: Handler, post: bool) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            session = self._session(request)
            if session is None:
                return _see("/dashboard/login", cookie_header(None, 0, self._secure(request)))
            if post:
                form = await _form(request)
                presented = form.get("csrf") or request.headers.get("x-csrf-token")
                if not session.csrf_ok(presented):
                    return _html(page("Refused", "", "<p>The form expired: reload the page."
                                      "</p>", session.csrf), 403)
            try:
                return await handler(request, session)
            except AenvError as err:
                status = http_status(err)
                return _html(page("Error", "", f'<p class="error" role="alert">{esc(err.message)}'
                                  "</p>", session.csrf), status)
        return endpoint

    def _get(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        return self._guarded(handler, post=False)

    def _post(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        return self._guarded(handler, post=True)

    @staticmethod
    def _secure(request: Request) -> bool:
        return request.url.scheme == "https"

    async def home(self, request: Request) -> Response:
        return _see("/dashboard/sandboxes")

    async def login_form(self, request: Request, error: str = "", status: int = 200) -> Response:
        alert = f'<p class="error" role="alert">{esc(error)}</p>' if error else ""
        body = (f'{alert}<form method="post" action="/dashboard/login">'
                '<label for="api-key">API key</label> '
                '<input id="api-key" name="api_key" type="password" autocomplete="off" required>'
                ' <button type="submit">Log in</button></form>')
        return _html(page("Log in", "", body, None), status)

    async def login(self, request: Request) -> Response:
        key = (await _form(request)).get("api_key", "").strip()
        key_id = self._parts.auth.identify(key) if key else None
        if key_id is None:
            log.info("dashboard login refused")
            return await self.login_form(request, "That API key is not valid.", 401)
        session = self.sessions.open(key, key_id)
        log.info("dashboard login", extra={"key_id": key_id})
        return _see("/dashboard/sandboxes",
                    cookie_header(session, self.sessions.ttl_s, self._secure(request)))

    async def logout(self, request: Request, session: Session) -> Response:
        self.sessions.close(session.session_id)
        return _see("/dashboard/login", cookie_header(None, 0, self._secure(request)))

    async def script(self, request: Request) -> Response:
        return Response(SCRIPT, media_type="text/javascript",
                        headers={"Cache-Control": "max-age=300"})

    # Pages ------------------------------------------------------------------------------

    async def sandboxes(self, request: Request, session: Session) -> Response:
        body = await self._sandboxes.list_body(request.query_params, session.csrf)
        return _html(page("Sandboxes", "sandboxes", body, session.csrf))

    async def sandbox_rows(self, request: Request, session: Session) -> Response:
        rows, _, _ = await self._sandboxes.rows(request.query_params, session.csrf)
        return _html(rows)

    async def sandbox(self, request: Request, session: Session) -> Response:
        sandbox_id = request.path_params["sandbox_id"]
        try:
            body = await self._sandboxes.detail_body(sandbox_id, session.key_id, session.csrf)
        except NotFound as err:
            raise await self._parts.deaths.explain(sandbox_id, err) from err
        return _html(page(f"Sandbox {sandbox_id}", "sandboxes", body, session.csrf))

    async def kill(self, request: Request, session: Session) -> Response:
        await self._parts.service.kill(request.path_params["sandbox_id"])
        return _see("/dashboard/sandboxes")

    async def pause(self, request: Request, session: Session) -> Response:
        sandbox_id = request.path_params["sandbox_id"]
        await self._parts.service.pause(sandbox_id)
        return _see(f"/dashboard/sandboxes/{sandbox_id}")

    async def resume(self, request: Request, session: Session) -> Response:
        sandbox_id = request.path_params["sandbox_id"]
        await self._parts.service.connect(sandbox_id, self._parts.resume_timeout_s)
        return _see(f"/dashboard/sandboxes/{sandbox_id}")

    async def templates(self, request: Request, session: Session) -> Response:
        body = await self._cluster.templates_body()
        return _html(page("Templates", "templates", body, session.csrf))

    async def template(self, request: Request, session: Session) -> Response:
        template_id = request.path_params["template_id"]
        body = await self._cluster.template_body(template_id)
        return _html(page(f"Template {template_id}", "templates", body, session.csrf))

    async def nodes(self, request: Request, session: Session) -> Response:
        return _html(page("Nodes", "nodes", self._cluster.nodes_body(), session.csrf))

    async def events(self, request: Request, session: Session) -> Response:
        body = await self._cluster.events_body(session.key_id)
        return _html(page("Events", "events", body, session.csrf))

    async def event_stream(self, request: Request, session: Session) -> Response:
        def valid() -> bool:
            return self.sessions.get(session.session_id) is not None and \
                self._parts.auth.identify(session.api_key) == session.key_id

        after = request.headers.get("last-event-id", "")
        return StreamingResponse(self._cluster.stream(session.key_id, valid, after),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache",
                                          "X-Accel-Buffering": "no"})

