import torch

from ._ops_compat import add_op_namespace_prefix
from .dsl import mutating_op
from .utils.library import python_op


@python_op(add_op_namespace_prefix("scale"), mutates_args=(), schema="(Tensor x, float s) -> Tensor")
def _scale(x: torch.Tensor, s: float) -> torch.Tensor:
    return x * s


@mutating_op(add_op_namespace_prefix("scale_into"), mutates_args={"out"})
def _scale_into(x: torch.Tensor, s: float, out: torch.Tensor) -> None:
    out.copy_(x * s)


def scale(x: torch.Tensor, s: float) -> torch.Tensor:
    return _scale(x, s)


def scale_into(x: torch.Tensor, s: float, out: torch.Tensor) -> torch.Tensor:
    _scale_into(x, s, out)
    return out
