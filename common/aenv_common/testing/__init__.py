"""Test helpers shared by every package's tests (real components, not fakes)."""
