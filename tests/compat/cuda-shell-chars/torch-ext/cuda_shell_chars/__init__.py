"""Refused: a CUDA flag with shell syntax."""
