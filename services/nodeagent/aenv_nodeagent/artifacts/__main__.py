"""`python -m aenv_nodeagent.artifacts build --cache-dir DIR [--envd-package PATH ...]`.

Prints a table of what it built or reused; under scripts/setup-step.sh ($AENV_STEP_SUMMARY set)
also that in one line, for `make`'s terminal.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from aenv_common.errors import AenvError

from . import build_guest_artifacts
from .cache import CacheEntry
from .preload import ensure_preload_library
from .rootfs import BASE_ROOTFS, CODE_INTERPRETER_ROOTFS, RootfsSpec, ensure_rootfs_build

app = typer.Typer(add_completion=False, help="Build or reuse aenv guest artifacts.")
console = Console()


@app.callback()
def main() -> None:
    """Guest artifact builder (subcommand required, so `build` stays explicit)."""


@app.command()
def build(
    cache_dir: Annotated[Path, typer.Option(help="Artifact cache directory.")],
    envd_package: Annotated[
        list[Path] | None, typer.Option(help="Local package dir to install on the tools disk.")
    ] = None,
    rootfs: Annotated[bool, typer.Option(help="Also build the templates' rootfs images.")] = True,
    code_interpreter: Annotated[bool, typer.Option(
        help="With --rootfs, code-interpreter-v1's too (else a node agent builds it in the "
             "background when it first starts).")] = True,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Build whatever is missing from the cache and print what was built or reused."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING)
    try:
        specs = [BASE_ROOTFS, CODE_INTERPRETER_ROOTFS] if code_interpreter else [BASE_ROOTFS]
        asyncio.run(_build(cache_dir.resolve(), envd_package or [], specs if rootfs else []))
    except AenvError as exc:
        console.print(f"[red]error:[/red] {exc.message}")
        raise typer.Exit(1) from exc


async def _build(cache_dir: Path, packages: list[Path], specs: list[RootfsSpec]) -> None:
    result, preload, images = await asyncio.gather(
        build_guest_artifacts(cache_dir, packages), ensure_preload_library(cache_dir),
        asyncio.gather(*(ensure_rootfs_build(cache_dir, spec) for spec in specs)))
    table = Table("artifact", "status", "seconds", "path")
    artifacts = result.artifacts
    paths = {"kernel": artifacts.kernel, "initramfs": artifacts.initrd,
             "toolsdisk": artifacts.tools_disk}
    rows = [(kind, entry, paths[kind]) for kind, entry in result.entries.items()]
    rows += [(spec.kind, image.entry, image.image.path)
             for spec, image in zip(specs, images, strict=True)]
    rows.append(("qemu preload", preload.entry, preload.path))
    for kind, entry, path in rows:
        table.add_row(kind, *_status(entry), str(path))
    console.print(table)
    _write_summary(summary_line({kind: entry for kind, entry, _ in rows}))
    console.print(f"kernel {artifacts.kernel_version}  digest {artifacts.digest}")
    console.print(f"cmdline {artifacts.cmdline}")


def _status(entry: CacheEntry) -> tuple[str, str]:
    return ("built", f"{entry.seconds:.1f}") if entry.built else ("reused", "-")


def summary_line(entries: dict[str, CacheEntry]) -> str:
    """What was built (with its time) and what reused, e.g. `built kernel (12 s); reused ...`."""
    built = [f"{kind} ({entry.seconds:.0f} s)" for kind, entry in entries.items() if entry.built]
    reused = [kind for kind, entry in entries.items() if not entry.built]
    if not built:
        return f"all {len(reused)} reused from the cache"
    return "; ".join(part for part in (
        "built " + ", ".join(built), "reused " + ", ".join(reused) if reused else "") if part)


def _write_summary(line: str) -> None:
    path = os.environ.get("AENV_STEP_SUMMARY")
    if path:
        Path(path).write_text(line + "\n")


if __name__ == "__main__":
    app()
