"""The E2B code-interpreter server (port 49999) of the `code-interpreter-v1` template."""
