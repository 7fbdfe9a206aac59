"""The people-facing commands of `aenv` (issue 17): auth, sandboxes, shells, exec, cp, top.

`register(app)` adds them to the `aenv` Typer app; each module keeps its own commands.
"""
