"""Ops registered through wrappers that pass the op name on (like flash-attn-ops, sonic-moe)."""

from .ops import scale, scale_into

__all__ = ["scale", "scale_into"]
