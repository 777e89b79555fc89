"""Own registration.h; ships config.json (pyext), not NOTES.md."""

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


def namespace_name() -> str:
    return ops.namespace_name()


def config() -> dict:
    import json
    from pathlib import Path

    return json.loads((Path(__file__).parent / "data" / "config.json").read_text())
