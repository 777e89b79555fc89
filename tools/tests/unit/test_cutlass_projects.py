"""Real kernel-builder projects plan with the CUTLASS release upstream pins (issue 32): for a
torch 2.14 + CUDA 13.0 variant, flash-mla, sage-attention and deep-gemm (`cutlass_4_0`) get
CUTLASS 4.0.0 itself, with no substitution, and their provenance names 4.0.0 and its source;
`cutlass_2_10` (quantization-eetq), `cutlass_3_9` (vllm-flash-attn3) and `cutlass_4_5` (natten)
give 2.10.0, 3.9.2 and 4.5.2. The plan, the include folders and the metadata's provenance are
made in process from the archives served locally; nothing is compiled."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from cutlass_fixtures import (archive_cache, no_pypi, release, served, server)  # noqa: F401
from cutlass_server import SHARED
from kbuild.core import manifest
from kbuild.stages import assemble, plan
from kbuild.stages.generate import cutlass
from kbuild_testing import fake_toolkit, fake_torch, make_probe_project

HEAVY = SHARED / "corpus" / "kernels-community-40d4194f-heavy.tar.gz"
ARCHS_130 = ["7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "9.0a", "10.0", "10.0a", "10.0f", "11.0",
             "12.0", "12.1"]


@pytest.fixture
def cu130(monkeypatch, archive_cache, served):  # noqa: F811
    """Plans a project for torch 2.14 + CUDA 13.0, with the served archives' cache."""
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(archive_cache))
    monkeypatch.setattr(plan, "find_cuda", lambda torch, *a, **k: fake_toolkit("13.0", ARCHS_130))

    def plan_of(project: Path) -> plan.VariantPlan:
        return plan.plan_variant(project, manifest.load(project), fake_torch("2.14.1", cuda="13.0"), "cuda")
    return plan_of


def resolved(cu130, project: Path, served) -> tuple[list[str], dict, dict]:  # noqa: F811
    """The warnings, the include folders by kernel (asserted to be those of `dep` for exactly
    the kernels that depend on it) and the provenance of `project`'s plan."""
    p = cu130(project)
    warnings: list[str] = []
    includes, _ = cutlass.kernel_includes(p, warn=warnings.append)
    assert served.hits == []  # the cache filled once per run is verified, not fetched again
    metadata = assemble.provenance(p).model_dump(by_alias=True, exclude_none=True)
    deps = {d["dependency"]: d for d in metadata["dependencies"]}
    for name, kernel in p.kernels.items():
        needs = [cutlass.CUTLASS[d] for d in kernel.depends if d in cutlass.CUTLASS]
        assert includes[name] == [d for r in needs for d in cutlass.include_dirs(tree_of(r))]
    return warnings, includes, deps


def tree_of(r: cutlass.Release) -> Path:
    return cutlass.cache.tree_path(r)


@pytest.mark.parametrize("name", ["flash-mla", "sage-attention", "deep-gemm"])
def test_heavy_projects_plan_with_cutlass_4_0_0_itself(name, cu130, served, tmp_path):  # noqa: F811
    if not HEAVY.is_file():
        pytest.skip(f"the heavy kernels-community projects are not beside this checkout ({HEAVY})")
    with tarfile.open(HEAVY) as archive:
        archive.extractall(tmp_path, members=[m for m in archive.getmembers()
                                              if m.name.startswith(f"{name}/")], filter="data")
    warnings, includes, deps = resolved(cu130, tmp_path / name, served)
    r = release("4.0.0")
    assert warnings == [] and set(deps) == {"cutlass_4_0"}
    assert cutlass.include_dirs(tree_of(r)) in includes.values()
    assert deps["cutlass_4_0"] == {"dependency": "cutlass_4_0", "cutlass": "4.0.0", "tag": "v4.0.0",
                                   "tree_sha256": r.tree_sha256,
                                   "url": f"{served.base}/v4.0.0.tar.gz"}


@pytest.mark.parametrize("project, dep, version", [("quantization-eetq", "cutlass_2_10", "2.10.0"),
                                                   ("vllm-flash-attn3", "cutlass_3_9", "3.9.2"),
                                                   ("natten", "cutlass_4_5", "4.5.2")])
def test_upstream_names_give_upstreams_versions(project, dep, version, cu130, served, tmp_path):  # noqa: F811
    root = make_probe_project(tmp_path / project, files={"csrc/k.cu": ""}, backends=("cuda",),
                              kernels={"k": {"backend": "cuda", "depends": ["torch", dep],
                                             "src": ["csrc/k.cu"], "cuda-capabilities": ["9.0"]}})
    warnings, includes, deps = resolved(cu130, root, served)
    r = release(version)
    assert warnings == [] and includes["k"] == cutlass.include_dirs(tree_of(r))
    assert deps[dep]["cutlass"] == version and deps[dep]["tree_sha256"] == r.tree_sha256
    assert "substitutes" not in deps[dep]
    if version == "2.10.0":  # the version.h CMake would have generated, named with its sha256
        assert deps[dep]["generated"] == r.generated_sha256() and len(r.generated_sha256()) == 1
