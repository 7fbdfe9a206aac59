"""GET /health, POST /init, GET /envs, GET /metrics (spec §3.6), and POST /sync for the node
agent (flush the guest's page cache before a filesystem-only pause or snapshot). /init also
mounts the sandbox's volumes (volume_mounts.py)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import os
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .config import EnvdConfig
from .errors import EnvdError, invalid_argument
from .files_http import http_error
from .state import SandboxState
from .system import MetricsReader, parse_rfc3339, reseed_rng, set_clock
from .trust import check_pem, install_ca
from .version import ENVD_VERSION
from .volume_mounts import VolumeMounter, parse_volume_mounts

log = logging.getLogger(__name__)
VERSION_HEADERS = {"x-envd-version": ENVD_VERSION}


class ControlEndpoints:
    def __init__(self, state: SandboxState, config: EnvdConfig) -> None:
        self._state = state
        self._config = config
        self._metrics = MetricsReader()
        self._trusted: tuple[str, dict[str, str]] | None = None  # the CA installed, its env
        self._volumes = VolumeMounter(config.volume_mount_timeout_s)

    async def health(self, request: Request) -> Response:
        return Response(status_code=204, headers=VERSION_HEADERS)

    async def envs(self, request: Request) -> Response:
        return JSONResponse(self._state.env_vars)

    async def metrics(self, request: Request) -> Response:
        return JSONResponse(self._metrics.snapshot())

    async def sync(self, request: Request) -> Response:
        """Returns once every filesystem's dirty data is on its disk."""
        await asyncio.to_thread(os.sync)
        return Response(status_code=204, headers=VERSION_HEADERS)

    async def init(self, request: Request) -> Response:
        """Called by the node agent after every boot, restore and fork; later calls replace."""
        try:
            raw = await request.body()
            body = json.loads(raw) if raw.strip() else {}
            if not isinstance(body, dict):
                raise ValueError("init body must be a JSON object")
            # Checked before anything is applied: a malformed mount changes nothing.
            mounts = parse_volume_mounts(body.get("volumeMounts"))
            self._apply(body)
        except ValueError as exc:
            return http_error(invalid_argument(f"invalid init body: {exc}"))
        if self._config.init_marker:
            _best_effort("mark init", _replace_marker, self._config.init_marker)
        try:
            # Every call lists them all again (a restored guest's /init): mounted ones are kept.
            await self._volumes.ensure(mounts)
        except EnvdError as exc:
            return http_error(exc)
        return Response(status_code=204, headers=VERSION_HEADERS)

    def _apply(self, body: dict[str, Any]) -> None:
        state = self._state
        env_vars = body.get("envVars")
        # Added to what the guest has, as upstream's: a template's ENV steps stay under the
        # sandbox's own variables.
        if isinstance(env_vars, dict):
            state.env_vars = state.env_vars | {str(k): str(v) for k, v in env_vars.items()}
        ca = body.get("egressCaCert")
        if isinstance(ca, str) and ca:
            # Defaults only: the sandbox's own variables of these names win.
            state.env_vars = self._trust_egress_ca(check_pem(ca)) | state.env_vars
        if "accessToken" in body:
            token = body["accessToken"]
            state.access_token = str(token) if token else None
        if isinstance(body.get("defaultUser"), str) and body["defaultUser"]:
            state.default_user = body["defaultUser"]
        if isinstance(body.get("defaultWorkdir"), str) and body["defaultWorkdir"]:
            state.default_workdir = body["defaultWorkdir"]
        entropy = body.get("entropy")
        if isinstance(entropy, str) and entropy and self._config.reseed_rng:
            try:
                seed = base64.b64decode(entropy, validate=True)
            except binascii.Error as exc:
                raise ValueError(f"entropy is not base64: {exc}") from exc
            _best_effort("reseed rng", reseed_rng, seed)
        timestamp = body.get("timestamp")
        if isinstance(timestamp, str) and timestamp and self._config.sync_clock:
            _best_effort("set clock", set_clock, parse_rfc3339(timestamp))
        # Not at info: each line costs a restored guest's console path under TCG (~1 MiB of
        # translated code per VM, bench/lifecycle.py); the node agent logs every restore.
        log.debug(
            "init applied",
            extra={"env_vars": len(state.env_vars), "token": state.access_token is not None},
        )

    def _trust_egress_ca(self, pem: str) -> dict[str, str]:
        # A guest restored from a capture that installed this CA (its template, a pause, a fork
        # parent) has it on disk: reading and comparing the bundle costs ~70 ms under TCG.
        if self._trusted is not None and self._trusted[0] == pem:
            return self._trusted[1]
        try:
            env = install_ca(pem, self._config.trust_paths)
        except OSError as exc:
            log.warning("init could not install the egress CA", extra={"errno": exc.errno})
            return {}
        self._trusted = (pem, env)
        return env


def _replace_marker(path: str) -> None:
    """A new file (a new inode) in place of the marker, after the state changed: whoever saw
    the old one knows to ask again. It says nothing itself (readable by the guest's user)."""
    directory, staged = os.path.dirname(path), f"{path}.{os.getpid()}"
    try:
        # Checked, not raised and caught: a restored guest's first run of this path is costly.
        if not os.path.isdir(directory):
            os.makedirs(directory, mode=0o755, exist_ok=True)
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.fchmod(fd, 0o644)  # whatever envd's umask
        finally:
            os.close(fd)
        os.replace(staged, path)
    except OSError:
        # A marker left from before this /init would pass stale variables for current ones;
        # without one, readers ask every time.
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def _best_effort(what: str, action: Callable[[Any], None], argument: Any) -> None:
    """Guest tweaks that need privileges must not fail /init (e.g. envd run unprivileged)."""
    try:
        action(argument)
    except OSError as exc:
        log.warning("init could not %s", what, extra={"errno": exc.errno})
