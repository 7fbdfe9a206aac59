"""Fakes of the node agent's seams (no QEMU, no processes) for fast unit tests."""
