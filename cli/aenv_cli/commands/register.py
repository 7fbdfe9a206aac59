"""Adds the people-facing commands to the `aenv` app (`main.py` calls `register`)."""

from __future__ import annotations

import typer

from aenv_cli.commands import copy, leases, sandboxes, shell, templates, top
from aenv_cli.commands.auth import auth_app
from aenv_cli.commands.keys import key_app
from aenv_cli.commands.snapshots import snapshot_app


def register(app: typer.Typer, template_app: typer.Typer) -> None:
    """`template_app` is `aenv template`'s group (its build, ls and rm are in main.py)."""
    auth_app.add_typer(key_app, name="key")
    app.add_typer(auth_app, name="auth")
    app.command("start")(shell.start)
    app.command("connect")(shell.connect)
    # Options come before the id, as docker's: everything after it is the command's.
    app.command("exec", context_settings={"allow_interspersed_args": False})(shell.exec_)
    for command in (sandboxes.ls, sandboxes.inspect, sandboxes.pause, sandboxes.resume,
                    sandboxes.rm, sandboxes.timeout, sandboxes.fork, sandboxes.reset,
                    sandboxes.logs):
        app.command(command.__name__)(command)
    app.command("cp")(copy.cp)
    app.command("top")(top.top)
    app.command("leases")(leases.leases)
    app.add_typer(snapshot_app, name="snapshot")
    template_app.command("inspect")(templates.inspect)
    template_app.command("pull")(templates.pull)
