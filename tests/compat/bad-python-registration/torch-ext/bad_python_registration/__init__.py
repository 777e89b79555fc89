"""Registers a custom op under a literal namespace (refused by the builder)."""

import torch

from ._ops import add_op_namespace_prefix


@torch.library.register_fake(add_op_namespace_prefix("scale_out"))
def _fake(x, s, out):
    return None


@torch.library.custom_op("bad_python_registration::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2
