"""A Jupyter kernel through jupyter_client's asyncio API: Python (ipykernel) and any other
installed kernelspec (R's IRkernel, `ir`).

A context runs one execution at a time, so one reader of the IOPub channel suffices: it keeps
the messages whose parent is the running request and drops the rest (replies of quiet setup
code, the tail of an interrupted cell).
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
from collections.abc import Mapping, Sequence
from typing import Any

from jupyter_client.manager import AsyncKernelManager

from . import outputs
from .errors import KernelFailed
from .kernel import OutputQueue

log = logging.getLogger(__name__)

START_TIMEOUT_S = 300.0  # under TCG an ipykernel takes minutes to come up
QUIET_TIMEOUT_S = 120.0
INTERRUPT_GRACE_S = 10.0

# Run in every Python kernel before anything else: DataFrames get E2B's `e2b/data`
# representation (looked up by name: pandas is only imported when the user's code uses it).
PYTHON_SETUP = """
def __aenv_setup():
    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName, Unicode

    class DataFormatter(BaseFormatter):
        format_type = Unicode("e2b/data")
        print_method = ObjectName("_repr_e2b_data_")
        _return_type = (dict, str)

    def frame(df):  # column -> its values, JSON-safe (numpy scalars, NaN, timestamps)
        import json
        return {str(column): json.loads(df[column].to_json(orient="values", date_format="iso"))
                for column in df.columns}

    display = get_ipython().display_formatter
    display.formatters["e2b/data"] = DataFormatter(parent=display)
    for module in ("pandas.core.frame", "pandas"):  # newer pandas names its classes `pandas.X`
        display.formatters["e2b/data"].for_type_by_name(module, "DataFrame", frame)
    if "e2b/data" not in display.active_types:
        display.active_types = [*display.active_types, "e2b/data"]

def __aenv_images():
    # As E2B's kernels: a PIL image saved to a named file or shown is also a result (PNG),
    # shown inline rather than by an external viewer a sandbox has no screen for.
    try:
        from PIL import Image, ImageShow
    except ImportError:
        return
    from IPython.display import display

    saving = Image.Image.save

    def save(image, fp, format=None, **params):
        if isinstance(fp, str):
            display(image)
        return saving(image, fp, format, **params)

    class Inline(ImageShow.Viewer):
        def show(self, image, **options):
            display(image)
            return 1

    Image.Image.save = save
    ImageShow.register(Inline(), -1)  # first: no other viewer is tried

__aenv_setup()
__aenv_images()
del __aenv_setup, __aenv_images
"""
# The default context's warm-up: what agents import first costs nothing in a sandbox.
PYTHON_WARM = "import numpy, pandas, matplotlib.pyplot"


class JupyterKernel:
    def __init__(self, language: str, kernel_name: str, cwd: str, warm: bool = False) -> None:
        self.language = language
        self._manager = AsyncKernelManager(kernel_name=kernel_name)
        self._cwd = cwd
        self._warm = warm
        self._client: Any = None
        self._running = ""  # the msg_id of the cell the kernel runs, if any

    async def start(self) -> None:
        try:
            await self._manager.start_kernel(cwd=self._cwd)
            self._client = self._manager.client()
            self._client.start_channels()
            await self._client.wait_for_ready(timeout=START_TIMEOUT_S)
        except Exception as err:
            await self.stop()
            raise KernelFailed(f"the {self.language} kernel did not start: {err}") from err
        await self._setup()

    async def _setup(self) -> None:
        if self.language == "python":
            await self.quietly(PYTHON_SETUP)
            if self._warm:
                await self.quietly(PYTHON_WARM)

    async def execute(self, code: str, outputs_queue: OutputQueue) -> None:
        # stop_on_error=False: a cell sent while an interrupted one is still unwinding must
        # run, not be aborted as queued behind an error.
        msg_id = self._running = self._client.execute(
            code, store_history=True, allow_stdin=False, stop_on_error=False)
        await self._until_idle(msg_id, outputs_queue)
        self._running = ""

    async def _until_idle(self, msg_id: str, queue: OutputQueue | None) -> None:
        """Reads IOPub until `msg_id`'s cell is idle, its outputs to `queue` (None: dropped)."""
        while True:
            msg = await self._client.get_iopub_msg()
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content.get("execution_state") == "idle":
                return
            if queue is not None and (output := _output(kind, content)) is not None:
                await queue.put(output)

    async def quietly(self, code: str) -> None:
        msg_id = self._client.execute(code, silent=True, store_history=False,
                                      allow_stdin=False)
        while True:
            try:
                reply = await self._client.get_shell_msg(timeout=QUIET_TIMEOUT_S)
            except queue.Empty:
                raise KernelFailed(f"the {self.language} kernel did not answer") from None
            if reply["parent_header"].get("msg_id") == msg_id:
                if reply["content"].get("status") == "error":
                    log.warning("setup code failed", extra={
                        "language": self.language, "error": reply["content"].get("ename")})
                return

    async def interrupt(self) -> None:
        """SIGINT, then the interrupted cell's end: the context's next cell starts after it."""
        interrupted, self._running = self._running, ""
        await self._manager.interrupt_kernel()
        if interrupted:
            try:
                await asyncio.wait_for(self._until_idle(interrupted, None), INTERRUPT_GRACE_S)
            except TimeoutError:
                log.warning("interrupted cell did not end", extra={"language": self.language})

    async def restart(self) -> None:
        try:
            await self._manager.restart_kernel(now=True)
            await self._client.wait_for_ready(timeout=START_TIMEOUT_S)
        except Exception as err:
            raise KernelFailed(f"the {self.language} kernel did not restart: {err}") from err
        await self._setup()

    async def stop(self) -> None:
        if self._client is not None:
            self._client.stop_channels()
        if self._manager.has_kernel:
            await self._manager.shutdown_kernel(now=True)

    def env_code(self, values: Mapping[str, str], removed: Sequence[str]) -> str:
        if self.language == "r":
            sets = [f"Sys.setenv({json.dumps(k)} = {json.dumps(v)})" for k, v in values.items()]
            return "\n".join(sets + [f"Sys.unsetenv({json.dumps(k)})" for k in removed])
        return (f"import os as __os\n__os.environ.update({dict(values)!r})\n"
                f"for __k in {list(removed)!r}: __os.environ.pop(__k, None)\n"
                "del __os")

    def reseed_code(self) -> str:
        if self.language == "r":
            return "set.seed(NULL)"
        return ("import random as __r, sys as __s\n__r.seed()\n"
                "if 'numpy' in __s.modules: __s.modules['numpy'].random.seed()\n"
                "del __r, __s")


def _output(kind: str, content: Mapping[str, Any]) -> outputs.Output | None:
    """One IOPub message as a stream line (None: nothing the SDK reads)."""
    if kind == "stream":
        name = "stderr" if content.get("name") == "stderr" else "stdout"
        return outputs.stream(name, str(content.get("text", "")))
    if kind == "execute_input":
        return outputs.execution_count(int(content.get("execution_count") or 0))
    if kind == "execute_result":
        return outputs.result(content.get("data") or {}, main=True)
    if kind == "display_data":
        return outputs.result(content.get("data") or {}, main=False)
    if kind == "error":
        return outputs.error(str(content.get("ename", "")), str(content.get("evalue", "")),
                             "\n".join(content.get("traceback") or []))
    return None
