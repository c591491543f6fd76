"""Builds of the real systems the test suite runs against (never shipped, never committed)."""
