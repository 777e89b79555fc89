"""Regression: a noarch project's `[general.<backend>]` python-depends reach the metadata of that
backend's variant (upstream's relu-nki lists `nki` under `[general.neuron]`), and only of that
one; kernel-depends likewise. Built for real (no compiler: noarch), checked as `kbuild check` does."""

from __future__ import annotations

from kbuild.core.built import BuiltVariant
from kbuild.stages import pipeline
from kbuild.stages.check import check_variant
from kbuild_testing import make_project

RELU_NKI = """
python-depends = ["einops"]

[general.neuron]
python-depends = ["nki"]
kernel-depends = [{ repo-id = "org/neuron-helpers", version = 1 }]

[general.xpu]
python-depends = ["onednn"]

[general.cuda]
python-depends = ["nvidia-cutlass-dsl"]

[torch-noarch]
"""


def test_backend_tables_reach_their_own_variant(tmp_path):
    project = make_project(tmp_path, RELU_NKI, backends='["neuron", "xpu", "cuda", "cpu"]')
    results = {r.variant: r for r in pipeline.build(project)}
    assert sorted(results) == ["torch-cpu", "torch-cuda", "torch-neuron", "torch-xpu"]
    meta = {name: BuiltVariant.load(r.path).metadata for name, r in results.items()}
    assert meta["torch-neuron"].python_depends == ["einops", "nki"]
    assert meta["torch-xpu"].python_depends == ["einops", "onednn"]
    assert meta["torch-cuda"].python_depends == ["einops", "nvidia-cutlass-dsl"]
    assert meta["torch-cpu"].python_depends == ["einops"]
    assert meta["torch-neuron"].kernel_depends == [{"repo-id": "org/neuron-helpers", "version": 1}]
    assert meta["torch-xpu"].kernel_depends == [] and meta["torch-cpu"].kernel_depends == []
    for r in results.values():
        report = check_variant(r.path, load=False)  # the kernels loader's parser agrees
        assert report.ok, (r.variant, report.problems)
