"""Helpers for the tests and benchmarks of every aenv package (real components, not fakes).

A package of its own, installed for development only: production code never imports it.
"""
