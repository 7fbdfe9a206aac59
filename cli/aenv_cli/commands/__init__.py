"""The people-facing commands of `aenv`: auth, sandboxes, shells, exec, cp, top.

`register(app)` adds them to the `aenv` Typer app; each module keeps its own commands.
"""
