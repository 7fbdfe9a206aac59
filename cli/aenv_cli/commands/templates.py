"""`aenv template inspect` and `aenv template pull` (beside `build|ls|rm` in main.py): on the
server the commands are logged in to."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from aenv_cli.commands.context import clients
from aenv_cli.commands.failures import clean_errors
from aenv_cli.commands.output import Format, show
from aenv_cli.pull_progress import PullProgress
from aenv_cli.templates import BuildLogPrinter, BuildRequest, Gateway, pull_image
from aenv_common.errors import InvalidArgument


def template_gateway(ctx: typer.Context, home: Path | None) -> Gateway:
    """The template API of the platform `aenv up --home home` runs, else of the server the
    commands are logged in to (`aenv auth`).

    :raise Unauthenticated: no login, no environment, no local platform.
    :raise Unavailable: nothing ever ran under `home`.
    """
    if home is not None:
        return Gateway.of_home(home)
    server = clients(ctx).server
    return Gateway(None, server.url, server.api_key)


@clean_errors
def inspect(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The template's name or id.")],
    output: Annotated[Format, typer.Option("--output", "-o", help="json or yaml.")] = Format.json,
) -> None:
    """Everything the server says of a template: names, resources, builds.

    Example: aenv template inspect python-dev
    """
    if output not in (Format.json, Format.yaml):
        raise InvalidArgument("template inspect shows json or yaml")
    given = clients(ctx)
    show(given.api.template(name), output, given.out, columns=())


@clean_errors
def pull(
    ctx: typer.Context,
    image: Annotated[str, typer.Argument(help="An OCI image, e.g. python:3.12-slim.")],
    name: Annotated[str, typer.Option(help="The template's name (`name` or `name:tag`).")],
    cpu: Annotated[int | None, typer.Option(help="vCPUs of its sandboxes.")] = None,
    memory_mb: Annotated[int | None, typer.Option(help="Memory of its sandboxes, MiB.")] = None,
    skip_cache: Annotated[bool, typer.Option(
        "--skip-cache", help="Build again even if nothing changed.")] = False,
) -> None:
    """Make a template of a registry image (the SDK's from_image): on a terminal a bar per
    layer and per phase, else the build's log lines.

    Example: aenv template pull python:3.12-slim --name py312
    """
    given = clients(ctx)
    gateway = template_gateway(ctx, None)
    request = BuildRequest(Path(image), name, cpu_count=cpu, memory_mb=memory_mb,
                           skip_cache=skip_cache)
    if given.out.is_terminal:
        with PullProgress(given.out) as progress:
            built = pull_image(gateway, image, request, progress)
    else:
        built = pull_image(gateway, image, request, BuildLogPrinter(given.out))
    given.out.print(f"[green]pulled[/] {image} as {built.name}: template id "
                    f"{built.template_id}, build id {built.build_id}")
