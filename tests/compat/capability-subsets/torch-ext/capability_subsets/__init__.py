"""Kernels with different capability lists."""

import torch

from ._ops import add_op_namespace_prefix, ops

__all__ = ["scale"]


@torch.library.register_fake(add_op_namespace_prefix("scale_out"))
def _scale_out_fake(x: torch.Tensor, s: float, out: torch.Tensor) -> None:
    return None


def scale(x: torch.Tensor, s: float) -> torch.Tensor:
    out = torch.empty_like(x)
    ops.scale_out(x, s, out)
    return out


def scale_hopper(x: torch.Tensor, s: float) -> torch.Tensor | None:
    """x * s with the sm_90a kernel, or None on a device that is not capability 9.0."""
    out = torch.empty_like(x)
    return out if ops.scale_hopper_out(x, s, out) else None
