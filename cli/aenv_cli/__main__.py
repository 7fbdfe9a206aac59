"""`python -m aenv_cli` = the `aenv` command."""

from aenv_cli.main import app

app()
