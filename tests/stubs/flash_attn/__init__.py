"""Test-only stand-in for flash-attn (see tests/stubs/README.md); importing works, calling raises."""

__version__ = "0.0.0+stub"
STUB = True
