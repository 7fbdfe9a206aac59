"""E2B template API routes (the SDKs' `Template.build`, `exists`, tags; the CLI's listing):
parse, call the catalog, builds and uploads, present."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aenv_common.errors import InvalidArgument, NotFound
from aenv_gateway.core.paging import paginate
from aenv_gateway.core.policy import MAX_PAGE
from aenv_gateway.core.snapshots import SnapshotService
from aenv_gateway.core.templates.builds import MAX_LOG_ENTRIES, TemplateBuilds
from aenv_gateway.core.templates.catalog import TemplateCatalog
from aenv_gateway.core.templates.cleanup import TemplateCleanup
from aenv_gateway.core.templates.names import split_name
from aenv_gateway.core.templates.records import CatalogTemplate
from aenv_gateway.core.templates.uploads import ContextUploads
from aenv_gateway.rest.boundary import Access, route
from aenv_gateway.rest.schemas import parse_json_object
from aenv_gateway.rest.templates import tag_views
from aenv_gateway.rest.templates.build_logs import build_logs
from aenv_gateway.rest.templates.public import NOT_YOUR_ALIAS, PublicTemplates, present_builtin
from aenv_gateway.rest.templates.wire import (
    NO_TEAMS,
    parse_build_request,
    parse_build_start,
    parse_tags_request,
    present_build,
    present_requested,
    present_status,
    present_tag,
    present_template,
)

# The status route answers at most this many log entries per call (as E2B's).
MAX_LOG_PAGE = 100
# Template and build listings answer at most this many per page (E2B's default and most).


class _TextConvertor(Convertor[str]):
    """A path parameter taken as it is; subclasses say which text matches."""

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


class AnyPathConvertor(_TextConvertor):
    """starlette's `path`, line breaks included: an id holding one is not found (404), not a
    method the route lacks (405)."""

    regex = "(?s:.*)"


register_url_convertor("anypath", AnyPathConvertor())


class TemplateIdConvertor(_TextConvertor):
    """One segment, never `tags`: `/templates/tags` is the tags resource, so a method it lacks
    is 405 there rather than a change of a template called `tags`."""

    regex = "(?!tags$)[^/]+"


register_url_convertor("template_id", TemplateIdConvertor())


def raw_template_id(request: Request) -> str:
    """The id is one percent-encoded path segment that may itself contain `/` and `:`
    (`team/snap:v1` -> `/templates/team%2Fsnap%3Av1`): decode it from the raw path."""
    raw = request.scope.get("raw_path") or request.url.path.encode()
    segment = raw.split(b"?", 1)[0].decode("latin-1").removeprefix("/templates/")
    return unquote(segment)


class TemplateRoutes:
    def __init__(
        self,
        catalog: TemplateCatalog,
        builds: TemplateBuilds,
        uploads: ContextUploads,
        snapshots: SnapshotService,
        default_envd_version: str,
        cleanup: TemplateCleanup,
    ) -> None:
        self._catalog = catalog
        self._public = PublicTemplates(catalog)
        self._builds = builds
        self._uploads = uploads
        self._cleanup = cleanup
        self._snapshots = snapshots
        self._envd_version = default_envd_version

    async def request_build(self, request: Request) -> Response:
        ask = parse_build_request(parse_json_object(await request.body()))
        template, build = await self._catalog.request_build(
            ask.name, ask.tags, ask.resources, ask.min_free_disk_mib)
        return JSONResponse(present_requested(template, build), status_code=202)

    async def upload_link(self, request: Request) -> Response:
        template = await self._catalog.require(request.path_params["template_id"])
        link = await self._uploads.link(template.template_id, request.path_params["hash"],
                                        str(request.base_url))
        return JSONResponse(link, status_code=201)

    async def upload(self, request: Request) -> Response:
        q = request.query_params
        await self._uploads.receive(request.path_params["hash"], q.get("expires", ""),
                                    q.get("signature", ""), request.stream())
        return Response(status_code=200)

    async def start_build(self, request: Request) -> Response:
        start = parse_build_start(parse_json_object(await request.body()))
        p = request.path_params
        await self._builds.start(p["template_id"], p["build_id"], start)
        return Response(status_code=202)

    async def build_status(self, request: Request) -> Response:
        p, q = request.path_params, request.query_params
        offset = _non_negative(q.get("logsOffset"), "logsOffset", 0)
        limit = min(_non_negative(q.get("limit"), "limit", MAX_LOG_PAGE), MAX_LOG_PAGE)
        page = await self._builds.status(p["template_id"], p["build_id"], offset, limit)
        level = q.get("level")
        entries = [e for e in page.entries if level is None or e.level == level]
        return JSONResponse(present_status(page.record, entries))

    async def alias(self, request: Request) -> Response:
        """E2B's: 403 for a template another team owns (the built-in ones), 404 for a tag
        (`name:tag`) the template lacks."""
        alias = request.path_params["alias"]
        wanted = split_name(alias)
        template = await self._catalog.find(wanted.name)
        if template is None or wanted.name not in template.names:
            await self._public.refuse_builtin(wanted.name, NOT_YOUR_ALIAS)
            raise NotFound(f"template alias '{alias}' not found")
        if ":" in alias and wanted.tag not in template.tags:
            raise NotFound(f"tag '{wanted.tag}' does not exist for template '{wanted.name}'")
        return JSONResponse({"templateID": template.template_id, "public": False})

    async def assign_tags(self, request: Request) -> Response:
        target, tags = parse_tags_request(parse_json_object(await request.body()), "target")
        await self._public.refuse_builtin(target)
        build_id, assigned = await self._catalog.assign_tags(target, tags)
        return JSONResponse({"tags": assigned, "buildID": build_id}, status_code=201)

    async def remove_tags(self, request: Request) -> Response:
        name, tags = parse_tags_request(parse_json_object(await request.body()), "name")
        await self._public.refuse_builtin(name)
        await self._catalog.remove_tags(name, tags)
        return Response(status_code=204)

    async def list_tags(self, request: Request) -> Response:
        tags = await self._public.tags(request.path_params["template_id"])
        return JSONResponse([present_tag(t) for t in tags])

    async def tag_count(self, request: Request) -> Response:
        assignments = await self._public.assignments(request.path_params["template_id"])
        return JSONResponse(tag_views.count(assignments))

    async def tag_exists(self, request: Request) -> Response:
        assignments = await self._public.assignments(request.path_params["template_id"])
        return JSONResponse(tag_views.exists(assignments, request.query_params))

    async def tag_groups(self, request: Request) -> Response:
        assignments = await self._public.assignments(request.path_params["template_id"])
        return JSONResponse(tag_views.groups(assignments, request.query_params))

    async def tag_assignments(self, request: Request) -> Response:
        p = request.path_params
        assignments = await self._public.assignments(p["template_id"])
        return JSONResponse(tag_views.assignments_of(assignments, p["tag"],
                                                     request.query_params))

    async def default_templates(self, request: Request) -> Response:
        """The built-in templates (E2B's `/default-templates`: its public defaults)."""
        return JSONResponse([present_builtin(r, self._envd_version)
                             for r in await self._public.builtins()])

    async def list_templates(self, request: Request) -> Response:
        _no_team(request)
        return JSONResponse(await self._shown(await self._catalog.list_templates()))

    async def list_templates_v2(self, request: Request) -> Response:
        """`GET /v2/templates`: the same, a page at a time (`limit`, `nextToken`; the next
        page's token in `X-Next-Token`, as E2B's v2 listings)."""
        _no_team(request)
        page, token = paginate(
            await self._catalog.list_templates(),
            lambda t: (t.created_at.ToNanoseconds(), t.template_id), newest_first=False,
            limit=_page_limit(request), cursor=request.query_params.get("nextToken") or None)
        return _paged(await self._shown(page), token)

    async def _shown(self, templates: list[CatalogTemplate]) -> list[dict[str, Any]]:
        return [present_template(t, await self._catalog.latest_build(t), self._envd_version)
                for t in templates]

    async def get_template(self, request: Request) -> Response:
        """TemplateWithBuilds: its builds newest first, a page at a time (`limit`,
        `nextToken`)."""
        builtin = await self._public.builtin(request.path_params["template_id"])
        if builtin is not None:
            return JSONResponse({**present_builtin(builtin, self._envd_version), "builds": []})
        template = await self._catalog.require(request.path_params["template_id"])
        builds, token = paginate(
            await self._catalog.builds_of(template.template_id),
            lambda b: (b.created_at.ToNanoseconds(), b.build_id), newest_first=True,
            limit=_page_limit(request), cursor=request.query_params.get("nextToken") or None)
        shown = present_template(template, await self._catalog.latest_build(template),
                                 self._envd_version)
        shown["builds"] = [present_build(b, self._envd_version) for b in builds]
        return _paged(shown, token)

    async def update_template(self, request: Request) -> Response:
        """`PATCH /templates/{id}` (v1: no body back) and `/v2/templates/{id}` (its names):
        TemplateUpdateRequest's one field, `public`, has no meaning here and is refused."""
        body = parse_json_object(await request.body())
        if "public" in body:
            raise InvalidArgument(
                "public: templates are not shared across teams here (every API key of the "
                "cluster sees every template), so there is nothing to publish or hide")
        if body:
            raise InvalidArgument(f"unknown field {sorted(body)[0]!r}")
        await self._public.refuse_builtin(request.path_params["template_id"])
        template = await self._catalog.require(request.path_params["template_id"])
        if request.url.path.startswith("/v2/"):
            return JSONResponse({"names": list(template.names)})
        return Response(status_code=200)

    async def build_logs(self, request: Request) -> Response:
        p = request.path_params
        page = await self._builds.status(p["template_id"], p["build_id"], 0, MAX_LOG_ENTRIES)
        return JSONResponse(build_logs(page.record.logs, request.query_params))

    async def delete(self, request: Request) -> Response:
        """A snapshot template or snapshot, else a template of the catalog (E2B deletes both
        here): snapshots first, so a snapshot template never goes without its snapshots."""
        name = raw_template_id(request)
        await self._public.refuse_builtin(name)
        if await self._snapshots.delete_named(name):
            return Response(status_code=204)
        removed = await self._catalog.delete(name, self._builds.building)
        if removed is None:
            raise NotFound(f"template '{name}' not found")
        await self._cleanup.after_delete(removed)
        return Response(status_code=204)

    def routes(self) -> list[Route]:
        return [
            route("/v3/templates", self.request_build, "POST"),
            route("/templates", self.list_templates, "GET"),
            route("/v2/templates", self.list_templates_v2, "GET"),
            route("/templates/{template_id:template_id}", self.update_template, "PATCH"),
            route("/v2/templates/{template_id}", self.update_template, "PATCH"),
            route("/templates/{template_id}/builds/{build_id}/logs", self.build_logs, "GET"),
            route("/templates/tags", self.assign_tags, "POST"),
            route("/templates/tags", self.remove_tags, "DELETE"),
            route("/templates/aliases/{alias}", self.alias, "GET"),
            route("/templates/{template_id}/files/{hash}", self.upload_link, "GET"),
            # The SDK PUTs without its API key, as to a presigned URL: the link is signed.
            route("/templates/{template_id}/files/{hash}", self.upload, "PUT", Access.OPEN),
            route("/v2/templates/{template_id}/builds/{build_id}", self.start_build, "POST"),
            route("/templates/{template_id}/builds/{build_id}/status", self.build_status, "GET"),
            route("/templates/{template_id}/tags", self.list_tags, "GET"),
            route("/templates/{template_id}/tags/count", self.tag_count, "GET"),
            route("/templates/{template_id}/tags/exists", self.tag_exists, "GET"),
            route("/templates/{template_id}/tags/groups", self.tag_groups, "GET"),
            route("/templates/{template_id}/tags/{tag}/assignments", self.tag_assignments,
                  "GET"),
            route("/default-templates", self.default_templates, "GET"),
            route("/templates/{template_id}", self.get_template, "GET"),
            # `:anypath` so a decoded `/` inside a snapshot's id still matches; the handler reads
            # the raw path.
            route("/templates/{template_id:anypath}", self.delete, "DELETE"),
        ]


def _no_team(request: Request) -> None:
    if request.query_params.get("teamID"):
        raise InvalidArgument(NO_TEAMS)


def _page_limit(request: Request) -> int:
    return max(1, min(_non_negative(request.query_params.get("limit"), "limit", MAX_PAGE),
                      MAX_PAGE))


def _paged(shown: Any, token: str | None) -> Response:
    response = JSONResponse(shown)
    if token is not None:
        response.headers["X-Next-Token"] = token
    return response


def _non_negative(value: str | None, name: str, default: int) -> int:
    if value is None or value == "":
        return default
    if not (value.isascii() and value.isdigit()):  # isdigit() alone takes "²"
        raise InvalidArgument(f"{name} must be a non-negative integer")
    return int(value)
