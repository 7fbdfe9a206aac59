"""`aenv template pull`'s progress on a terminal: a bar per phase of the build (the image had,
the template made) and one per layer of the image, drawn from the build's log lines as the
node writes them (`pulling <image>`, `layer N/M <digest> (<size> MiB) pulled|cached`, `base
disk of ... ready`, `booting the template's VM ...`, `template ready ...`). The node tells a
layer once it has it, not its bytes as they come: a layer's bar fills when it is had. Every
other line is printed above the bars, as `BuildLogPrinter` prints it."""

from __future__ import annotations

import re
from types import TracebackType

from e2b.template.logger import LogEntry, LogEntryEnd, LogEntryStart
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from aenv_cli.templates import BuildLogPrinter

_LAYER = re.compile(r"layer (\d+)/(\d+) (\S+) \(([\d.]+) MiB\) (pulled|cached)")
_IMAGE_STARTS = "pulling "
_IMAGE_DONE = re.compile(r"base disk of .* ready")
_TEMPLATE_STARTS = "booting the template's VM"
_TEMPLATE_DONE = "template ready"


class PullProgress:
    """An `on_build_logs` callback drawing bars; a context manager around the build."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
            TextColumn("{task.fields[state]}"), TimeElapsedColumn(),
            console=console, transient=False,
        )
        self._lines = BuildLogPrinter(self.progress.console)
        self._image: TaskID | None = None
        self._template: TaskID | None = None
        self._layers: dict[int, TaskID] = {}

    def __enter__(self) -> PullProgress:
        self.progress.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.progress.stop()

    def __call__(self, entry: LogEntry) -> None:
        if isinstance(entry, LogEntryStart | LogEntryEnd):
            return
        message = entry.message
        if layer := _LAYER.fullmatch(message):
            self._layer_had(layer)
        elif message.startswith(_IMAGE_STARTS) and self._image is None:
            self._image = self._phase(f"image {message.removeprefix(_IMAGE_STARTS)}")
        elif _IMAGE_DONE.fullmatch(message):
            self._done(self._image, "unpacked")
        elif message.startswith(_TEMPLATE_STARTS):
            self._template = self._phase("template: boot, recipe, capture")
        elif message.startswith(_TEMPLATE_DONE):
            self._done(self._template, "ready")
        self._lines(entry)

    def _phase(self, description: str) -> TaskID:
        return self.progress.add_task(description, total=1, state="")

    def _done(self, task: TaskID | None, state: str) -> None:
        if task is not None:
            self.progress.update(task, completed=1, state=state)

    def _layer_had(self, layer: re.Match[str]) -> None:
        number, count = int(layer[1]), int(layer[2])
        for pending in range(1, count + 1):  # all of them, waiting, at the first one had
            if pending not in self._layers:
                self._layers[pending] = self.progress.add_task(
                    f"  layer {pending}/{count}", total=1, state="waiting")
        self.progress.update(
            self._layers[number], completed=1, state=f"{layer[4]} MiB {layer[5]}",
            description=f"  layer {number}/{count} {layer[3]}")
