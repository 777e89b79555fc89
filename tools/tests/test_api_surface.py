"""What the real load records of a variant's public API (resources/scripts/probe_variant.py) and
what publish/api.py's `compare` makes of two such records: a function removed from a public
submodule, a changed default (top level and submodule), a layer losing a flag
`kernels.kernelize` reads, and a changed public constant are breaks. Noarch projects (no
compiler), built and loaded for real."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbuild.core.built import BuiltVariant
from kbuild.publish.api import compare
from kbuild.stages import pipeline
from kbuild.stages.check import probe_load
from kbuild_testing import make_project

INIT = '''\
"""demo: scale."""
import torch

from . import layers, utils

__all__ = ["scale", "FACTOR", "layers", "utils"]
FACTOR = {factor}


def scale(x: torch.Tensor, factor: float = {factor}) -> torch.Tensor:
    return x * factor
'''
UTILS = '''\
import torch

EPS = 1e-6


def pad(x: torch.Tensor, mode: str = {mode!r}) -> torch.Tensor:
    return x
{extra}'''
TRIM = '''

def trim(x: torch.Tensor) -> torch.Tensor:
    return x
'''
LAYERS = '''\
import torch


class Scale(torch.nn.Module):
    has_backward = {backward}
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2
'''


def demo(root: Path, *, factor: int = 2, mode: str = "zeros", trim: bool = True,
         backward: bool = True) -> dict:
    """The demo kernel built (noarch, CPU) and loaded: the API its load records."""
    project = make_project(root, "[torch-noarch]\n", backends='["cpu"]')
    package = project / "torch-ext" / "demo"
    (package / "__init__.py").write_text(INIT.format(factor=factor))
    (package / "utils.py").write_text(UTILS.format(mode=mode, extra=TRIM if trim else ""))
    (package / "layers.py").write_text(LAYERS.format(backward=backward))
    pipeline.build(project)
    variant = BuiltVariant.load(project / "build" / "torch-cpu")
    result = probe_load(variant.path, None, variant.metadata.id or "")
    assert result["loadable"] and "api" in result, result
    return result["api"]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict:
    return demo(tmp_path_factory.mktemp("base") / "demo")


def test_the_load_records_submodules_defaults_kernelize_flags_and_constants(base):
    assert base["python"]["FACTOR"] == {"kind": "value", "type": "int", "value": "2"}
    assert base["python"]["scale"]["defaults"] == {"factor": "2"}
    assert base["submodules"]["utils"] == {"kind": "module"}
    assert base["submodules"]["utils.pad"]["defaults"] == {"mode": "'zeros'"}
    assert base["submodules"]["utils.trim"]["kind"] == "function"
    assert base["submodules"]["utils.EPS"]["value"] == "1e-06"
    assert base["layers"]["Scale"]["kernelize"] == {"has_backward": True,
                                                    "can_torch_compile": True}
    assert compare("torch-cpu", base, base) == []


@pytest.mark.parametrize("change, symbol", [
    ({"trim": False}, "function utils.trim"),
    ({"mode": "reflect"}, "function utils.pad"),
    ({"factor": 3}, "function scale"),
    ({"backward": False}, "layer Scale")])
def test_each_break_is_found_in_what_the_load_records(base, tmp_path, change, symbol):
    changed = demo(tmp_path / "demo", **change)
    breaking = {c.symbol for c in compare("torch-cpu", base, changed) if c.breaking}
    expected = {symbol} | ({"value FACTOR"} if "factor" in change else set())
    assert breaking == expected
