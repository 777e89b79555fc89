"""float -> half -> float through CUTLASS's NumericConverter (headers from nvidia-cutlass 3.8)."""

import torch

from ._ops import ops

__all__ = ["round_half"]


def round_half(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    out = torch.empty_like(x)
    version = ops.round_half_out(x, out)
    return out, version
