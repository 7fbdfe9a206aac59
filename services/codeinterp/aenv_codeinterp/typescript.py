"""TypeScript contexts: a JavaScript context (node.py) whose cells are first turned into
JavaScript by esbuild (Debian's `esbuild`), as E2B's server compiles them before its JavaScript
kernel runs them. Types are stripped, not checked; a cell that does not parse is an error named
`TypeScriptCompilerError`, as E2B names it, and runs nothing."""

from __future__ import annotations

import asyncio

from . import outputs
from .errors import InterpreterError
from .kernel import OutputQueue
from .nodejs import NodeKernel

ESBUILD = "esbuild"
COMPILE_TIMEOUT_S = 60.0  # a Go binary: milliseconds natively, far less than a minute on TCG
COMPILER_ERROR = "TypeScriptCompilerError"


class CompileFailed(InterpreterError):
    """esbuild refused the cell; the message is its own."""


async def transpile(code: str) -> str:
    """`code` as JavaScript: ESM syntax and top-level `await` are kept for the Node.js context.

    :raise CompileFailed: it does not parse, or esbuild could not run.
    """
    try:
        process = await asyncio.create_subprocess_exec(
            ESBUILD, "--loader=ts", "--log-level=error", "--color=false",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
    except OSError as err:
        raise CompileFailed(f"esbuild did not start: {err}") from err
    try:
        script, diagnostics = await asyncio.wait_for(process.communicate(code.encode()),
                                                     COMPILE_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise CompileFailed("esbuild did not finish") from None
    if process.returncode != 0:
        raise CompileFailed(diagnostics.decode(errors="replace").strip())
    return script.decode()


class TypeScriptKernel(NodeKernel):
    language = "typescript"

    async def execute(self, code: str, outputs_queue: OutputQueue) -> None:
        try:
            script = await transpile(code)
        except CompileFailed as err:
            await outputs_queue.put(outputs.error(COMPILER_ERROR, err.message, ""))
            return
        await super().execute(script, outputs_queue)
