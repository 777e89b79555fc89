"""Refused: CUTLASS 3.9 is not on PyPI."""
