"""The static check of Python op registrations: names must come from add_op_namespace_prefix."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kbuild.stages.pyops import check_file, check_package
from kbuild.core.errors import BuildError

GOOD = """
import torch
from torch.library import custom_op, triton_op
import torch.library as tl

from ._ops import add_op_namespace_prefix, ops
from . import _ops


@torch.library.register_fake(add_op_namespace_prefix("a"))
def a_fake(x): ...


@custom_op(add_op_namespace_prefix("b"), mutates_args=())
def b(x: torch.Tensor) -> torch.Tensor: ...


@b.register_fake
def _(x): ...


@b.register_kernel("cpu")
def _(x): ...


tl.register_kernel(_ops.add_op_namespace_prefix("c"), "cuda")(lambda x: x)
torch.library.register_fake(ops.scale_out)(lambda *a: None)
torch.library.register_autograd(ops.scale_out.default, lambda ctx, g: g)
triton_op(add_op_namespace_prefix("d"), mutates_args=())
lib = torch.library.Library(_ops.ops.name, "FRAGMENT")
lib.define("e(Tensor x) -> Tensor")
lib.impl("e", lambda x: x, "CPU")
"""

BAD = """
import torch
from torch.library import custom_op, register_fake as fake
import torch.library as tl
from torch import library

NAME = "mylib::g"


@custom_op("mylib::a", mutates_args=())
def a(x: torch.Tensor) -> torch.Tensor: ...


@fake(f"mylib::{'b'}")
def b_fake(x): ...


tl.register_kernel(NAME, "cpu")(lambda x: x)
library.define("mylib::c(Tensor x) -> Tensor")
torch.library.impl(qualname="mylib::c", types="CPU")
torch.library.register_fake(torch.ops.mylib.d)
lib = torch.library.Library("mylib", "FRAGMENT")
ours = torch.library.Library(NAME, "IMPL")
ours.define("mylib::e(Tensor x) -> Tensor")
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mod.py"
    path.write_text(textwrap.dedent(text))
    return path


def test_registrations_through_the_prefix_or_op_objects_pass(tmp_path):
    assert check_file(write(tmp_path, GOOD)) == []


def test_hand_written_namespaces_are_found_with_their_lines(tmp_path):
    found = check_file(write(tmp_path, BAD))
    assert [(v.line, v.call) for v in found] == [
        (10, "torch.library.custom_op"), (14, "torch.library.register_fake"),
        (18, "torch.library.register_kernel"), (19, "torch.library.define"),
        (20, "torch.library.impl"), (21, "torch.library.register_fake"),
        (22, "torch.library.Library"), (23, "torch.library.Library"), (24, "Library.define")]


def test_package_check_raises_one_error_with_file_and_line(tmp_path):
    project = tmp_path / "proj"
    pkg = project / "torch-ext" / "k"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import torch\n\n\n@torch.library.custom_op('x::y', mutates_args=())\n"
                                     "def y(t: torch.Tensor) -> torch.Tensor: ...\n")
    (pkg / "data.json").write_text("{")
    with pytest.raises(BuildError) as e:
        check_package([(pkg / "__init__.py", "__init__.py"), (pkg / "data.json", "data.json")], project)
    assert str(e.value.file) == f"{pkg / '__init__.py'}:4"
    assert "add_op_namespace_prefix" in e.value.message and "add_op_namespace_prefix" in e.value.hint


def test_invalid_python_is_reported_not_raised(tmp_path):
    (found,) = check_file(write(tmp_path, "def broken(:\n"))
    assert found.line == 1 and found.call == "syntax"
