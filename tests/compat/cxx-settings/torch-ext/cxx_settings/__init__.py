"""The sum of a float tensor."""

import torch

from ._ops import ops

__all__ = ["total"]


def total(x: torch.Tensor) -> float:
    return ops.total(x.contiguous())
