"""The capacity tests run the guard over the sandbox wing of fake VMs (tests/sandbox)."""

from ..sandbox.conftest import templates, wing

__all__ = ["templates", "wing"]
