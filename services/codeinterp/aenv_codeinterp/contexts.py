"""Contexts: a kernel each, with its language and cwd; one default per language (the one
`/execute` uses when given a language or nothing), the rest made by `POST /contexts`.

An execution holds its context's lock: cells of one context run one at a time, contexts in
parallel. Before each, the context catches up with its sandbox (envs.py): variables envd has
that the kernel lacks are set, ones it dropped removed, and when the sandbox is another one
than at the last cell (a fork child, a create from a snapshot) its random generators are
reseeded, so clones diverge. A cell's own variables last for that cell only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyter_client.kernelspec import KernelSpecManager

from .bash import BashKernel
from .envs import EnvSource
from .errors import BadRequest, InterpreterError, LanguageUnavailable, UnknownContext
from .jupyter import JupyterKernel
from .kernel import Kernel, OutputQueue
from .nodejs import NODE, NodeKernel
from .typescript import ESBUILD, TypeScriptKernel

log = logging.getLogger(__name__)

DEFAULT_CWD = "/home/user"
# Started before the health check answers, so the template's capture holds them warm. Not R's
# nor TypeScript's, as on E2B (they start on their first cell): a warm R kernel holds ~110 MiB
# of a 512 MiB sandbox (146 MiB left available instead of 246).
DEFAULT_LANGUAGES = ("python", "javascript", "bash")
# The SDK's names (`Literal["python", "javascript", "typescript", "r", "java", "bash"]`) and
# their short forms.
ALIASES = {"js": "javascript", "ts": "typescript", "py": "python", "python3": "python",
           "sh": "bash"}
SANDBOX_ID = "E2B_SANDBOX_ID"


def normalize_language(language: str | None) -> str:
    name = (language or "python").strip().lower()
    return ALIASES.get(name, name)


def available_languages() -> list[str]:
    """What this sandbox can run: Python always; JavaScript with Node.js, TypeScript with it
    and esbuild; R with IRkernel."""
    found = ["python", "bash"]
    if shutil.which(NODE):
        found.append("javascript")
        if shutil.which(ESBUILD):
            found.append("typescript")
    if "ir" in KernelSpecManager().find_kernel_specs():
        found.append("r")
    return found


def new_kernel(language: str, cwd: str, *, warm: bool = False) -> Kernel:
    """:raise LanguageUnavailable: no kernel for `language` here."""
    if language not in available_languages():
        raise LanguageUnavailable(
            f"language '{language}' is not available in this sandbox "
            f"(it runs: {', '.join(available_languages())})")
    if language == "python":
        return JupyterKernel("python", "python3", cwd, warm=warm)
    if language == "r":
        return JupyterKernel("r", "ir", cwd)
    if language == "javascript":
        return NodeKernel(cwd)
    if language == "typescript":
        return TypeScriptKernel(cwd)
    return BashKernel(cwd)


@dataclass
class Context:
    id: str
    language: str
    cwd: str
    kernel: Kernel
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    applied: dict[str, str] = field(default_factory=dict)  # the sandbox's, set in the kernel

    def describe(self) -> dict[str, str]:
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    async def run(self, code: str, env_vars: Mapping[str, str], access_token: str | None,
                  envs: EnvSource, outputs: OutputQueue) -> None:
        async with self.lock:
            await self._catch_up(await envs.fetch(access_token))
            if env_vars:
                await self.kernel.quietly(self.kernel.env_code(env_vars, []))
            try:
                await self.kernel.execute(code, outputs)
            except asyncio.CancelledError:
                await self.kernel.interrupt()  # the client went away mid-cell
                raise
            finally:
                if env_vars:
                    await self._restore(env_vars)

    async def _catch_up(self, sandbox: dict[str, str]) -> None:
        changed = {k: v for k, v in sandbox.items() if self.applied.get(k) != v}
        gone = [k for k in self.applied if k not in sandbox]
        code = [self.kernel.env_code(changed, gone)] if changed or gone else []
        if sandbox.get(SANDBOX_ID) != self.applied.get(SANDBOX_ID) and SANDBOX_ID in sandbox:
            code.append(self.kernel.reseed_code())
        if code:  # one round trip: a restored kernel's first ones are its slowest
            await self.kernel.quietly("\n".join(code))
        self.applied = dict(sandbox)

    async def _restore(self, env_vars: Mapping[str, str]) -> None:
        back = {k: self.applied[k] for k in env_vars if k in self.applied}
        await self.kernel.quietly(
            self.kernel.env_code(back, [k for k in env_vars if k not in self.applied]))

    async def restart(self) -> None:
        async with self.lock:
            await self.kernel.restart()
            self.applied = {}


class Contexts:
    def __init__(self, envs: EnvSource, default_cwd: str = DEFAULT_CWD) -> None:
        self.envs = envs
        self._cwd = default_cwd
        self._contexts: dict[str, Context] = {}
        self._defaults: dict[str, str] = {}  # language -> its default context's id
        self._making: dict[str, asyncio.Lock] = {}  # per language: its default made once
        self.ready = False

    async def start_defaults(self) -> None:
        """The default contexts, warm, before the health check says ready."""
        languages = [name for name in DEFAULT_LANGUAGES if name in available_languages()]
        try:
            await asyncio.gather(*(self.default(name) for name in languages))
        except InterpreterError as err:
            log.error("default contexts failed", extra={"error": err.message})
            raise
        self.ready = True
        log.info("default contexts ready", extra={"contexts": len(self._contexts)})

    async def create(self, language: str | None, cwd: str | None, *, warm: bool = False
                     ) -> Context:
        """:raise LanguageUnavailable: no kernel for it. :raise KernelFailed: it did not start."""
        name, cwd = normalize_language(language), cwd or self._cwd
        kernel = new_kernel(name, cwd, warm=warm)
        _make_cwd(cwd)
        await kernel.start()
        context = Context(str(uuid.uuid4()), name, cwd, kernel)
        self._contexts[context.id] = context
        return context

    async def default(self, language: str | None) -> Context:
        """The language's default context, started the first time it is asked for."""
        name = normalize_language(language)
        async with self._making.setdefault(name, asyncio.Lock()):
            if (found := self._defaults.get(name)) in self._contexts:
                return self._contexts[found]
            context = await self.create(name, self._cwd, warm=True)
            self._defaults[name] = context.id
            log.info("default context started", extra={"language": name})
            return context

    def get(self, context_id: str) -> Context:
        """:raise UnknownContext: no such context."""
        try:
            return self._contexts[context_id]
        except KeyError:
            raise UnknownContext(f"Context {context_id} not found") from None

    def all(self) -> list[Context]:
        return list(self._contexts.values())

    async def remove(self, context_id: str) -> None:
        context = self.get(context_id)
        del self._contexts[context_id]
        await context.kernel.stop()

    async def stop(self) -> None:
        for context in list(self._contexts.values()):
            await context.kernel.stop()
        self._contexts.clear()


def _make_cwd(cwd: str) -> None:
    """A context's cwd is made when missing (E2B's kernels keep theirs then, while the context
    names the one asked for); the server runs as root, as E2B's, so any path can be.

    :raise BadRequest: it cannot be made (a file is in the way).
    """
    try:
        os.makedirs(cwd, exist_ok=True)
    except OSError as err:
        raise BadRequest(f"the context's cwd {cwd!r} cannot be made: {err.strerror}") from None


def parse_env_vars(raw: Any) -> dict[str, str]:
    """The request's `env_vars` (null or an object of strings)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise TypeError("env_vars must be an object")
    return {str(k): str(v) for k, v in raw.items()}
