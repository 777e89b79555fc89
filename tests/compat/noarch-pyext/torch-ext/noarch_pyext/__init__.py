"""A pure-Python kernel that ships a JSON table (pyext) and not its notes."""

import json
from pathlib import Path

import torch

TABLE = json.loads((Path(__file__).parent / "table.json").read_text())


def lookup(x: torch.Tensor) -> torch.Tensor:
    return torch.tensor(TABLE["values"], dtype=x.dtype, device=x.device)[x.long()]
