"""The `aenv` command and the Python client of the native API."""
