"""The server's errors, each with the HTTP status the edge answers it with (app.py).

The SDK turns a 404 into `NotFoundException` and any other failure into `SandboxException`
with the status and this text, so the text names what is wrong.
"""

from __future__ import annotations


class InterpreterError(Exception):
    """Base of the server's errors."""

    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(InterpreterError):
    """A malformed request: not JSON, wrong field types, both a context and a language."""

    status = 400


class UnknownContext(InterpreterError):
    """No context has that id (it was removed, or never existed)."""

    status = 404


class LanguageUnavailable(InterpreterError):
    """A language this sandbox has no kernel for. A client error, as E2B's SDK expects one: the
    request names what the template cannot run (400, not a 5xx that reads as a crash)."""

    status = 400


class KernelFailed(InterpreterError):
    """A kernel that would not start or restart."""

    status = 500
