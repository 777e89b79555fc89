"""min(x * s, hi) by a __device__ lambda."""

import torch

from ._ops import ops

__all__ = ["clamp_scale"]


def clamp_scale(x: torch.Tensor, s: float, hi: float) -> torch.Tensor:
    out = torch.empty_like(x)
    ops.clamp_scale_out(x, s, hi, out)
    return out
