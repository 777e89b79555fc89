"""Refused: capability 3.5."""
