"""Helpers of the volume end-to-end tests (tests/e2e/test_volumes*.py)."""
