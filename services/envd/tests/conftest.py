"""Fixtures live in envd_harness (importable by name, unlike conftest)."""

from envd_harness import control_plane, envd, sdk_env

__all__ = ["control_plane", "envd", "sdk_env"]
