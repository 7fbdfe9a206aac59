"""`python -m aenv_nodeagent.artifacts build --cache-dir DIR [--envd-package PATH ...]`."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from aenv_common.errors import AenvError

from . import build_guest_artifacts
from .cache import CacheEntry
from .preload import ensure_preload_library
from .rootfs import BASE_ROOTFS, CODE_INTERPRETER_ROOTFS, ensure_rootfs_build

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
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Build whatever is missing from the cache and print what was built or reused."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING)
    try:
        asyncio.run(_build(cache_dir.resolve(), envd_package or [], rootfs))
    except AenvError as exc:
        console.print(f"[red]error:[/red] {exc.message}")
        raise typer.Exit(1) from exc


async def _build(cache_dir: Path, packages: list[Path], with_rootfs: bool) -> None:
    specs = [BASE_ROOTFS, CODE_INTERPRETER_ROOTFS] if with_rootfs else []
    result, preload, images = await asyncio.gather(
        build_guest_artifacts(cache_dir, packages), ensure_preload_library(cache_dir),
        asyncio.gather(*(ensure_rootfs_build(cache_dir, spec) for spec in specs)))
    table = Table("artifact", "status", "seconds", "path")
    artifacts = result.artifacts
    paths = {"kernel": artifacts.kernel, "initramfs": artifacts.initrd,
             "toolsdisk": artifacts.tools_disk}
    for kind, entry in result.entries.items():
        table.add_row(kind, *_status(entry), str(paths[kind]))
    for spec, image in zip(specs, images, strict=True):
        table.add_row(spec.kind, *_status(image.entry), str(image.image.path))
    table.add_row("qemu preload", *_status(preload.entry), str(preload.path))
    console.print(table)
    console.print(f"kernel {artifacts.kernel_version}  digest {artifacts.digest}")
    console.print(f"cmdline {artifacts.cmdline}")


def _status(entry: CacheEntry) -> tuple[str, str]:
    return ("built", f"{entry.seconds:.1f}") if entry.built else ("reused", "-")


if __name__ == "__main__":
    app()
