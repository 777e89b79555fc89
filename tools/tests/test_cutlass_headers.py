"""A real CUTLASS tree from PyPI: provisioned, verified, compiled against with nvcc, and
provisioned again after an edit. The tree and the probe sit at the same paths in every run, so
the probe's compile is a hit of the run's compiler cache once the same sources compiled."""

from __future__ import annotations

import re

import pytest

from kbuild.core.errors import BuildError
from kbuild.core.runner import capture
from kbuild.stages import deps
from kbuild.stages.compile import compiler_launcher, is_ccache
from kbuild.stages.toolchain import nvcc_candidates
from kbuild_testing import work_folder

pytestmark = pytest.mark.slow

PROBE = """\
#include <cutlass/cutlass.h>
#include <cutlass/numeric_conversion.h>
#include <cutlass/version.h>
#include <cutlass/util/host_tensor.h>
#include <cute/tensor.hpp>

static_assert(CUTLASS_MAJOR == {major} && CUTLASS_MINOR == {minor}, "wrong CUTLASS");

__global__ void round_half(float* x) {{
  cutlass::NumericConverter<cutlass::half_t, float> to_half;
  x[threadIdx.x] = float(to_half(x[threadIdx.x]));
}}
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    release = deps.CUTLASS["cutlass_4_5"]  # a tree vendored by another package than NVIDIA's
    root = work_folder("cutlass-headers", tmp_path_factory.mktemp("cutlass-headers")) / "cache"
    try:
        return release, root, deps.provision(release, root)
    except BuildError as e:
        if "could not download" in e.message:
            pytest.skip(f"PyPI unreachable, no CUTLASS wheel to test with: {e.message}")
        raise


def nvcc():
    found = [p for p in nvcc_candidates() if p.is_file()]
    if not found:
        pytest.skip("no nvcc on this machine")
    return str(found[0])


def test_the_tree_is_the_pinned_release_with_upstreams_include_dirs(tree):
    release, _, path = tree
    version = (path / "include/cutlass/version.h").read_text()
    assert [re.search(rf"#define CUTLASS_{k} (\d+)", version)[1] for k in ("MAJOR", "MINOR", "PATCH")] \
        == release.cutlass.split(".")
    for header in ("include/cute/tensor.hpp", "include/cutlass/gemm/collective/collective_builder.hpp",
                   "tools/util/include/cutlass/util/host_tensor.h"):
        assert (path / header).is_file(), header
    assert sorted(p.name for p in path.iterdir()) == [deps.STAMP, "include", "tools"]
    assert deps.verify_tree(path, release) is None


def test_nvcc_compiles_against_the_tree(tree):
    release, root, path = tree
    major, minor = release.minor
    tmp_path = root.parent / "probe"
    tmp_path.mkdir()
    src = tmp_path / "probe.cu"
    src.write_text(PROBE.format(major=major, minor=minor))
    includes = [f"-I{d}" for d in deps.include_dirs(path)]
    launcher = [cache] if is_ccache(cache := compiler_launcher()) else []  # as the builds use it
    built = capture([*launcher, nvcc(), "-std=c++17", "--expt-relaxed-constexpr", *includes, "-c",
                     str(src), "-o", str(tmp_path / "probe.o")], timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    # the collective builders include .inl files, which sdists of other packages leave out
    builder = tmp_path / "builder.cu"
    builder.write_text("#include <cutlass/gemm/collective/collective_builder.hpp>\n")
    pre = capture([nvcc(), "-std=c++17", *includes, "-E", str(builder), "-o", str(tmp_path / "b.ii")],
                  timeout=600)
    assert pre.returncode == 0, pre.stderr[-3000:]
    assert "sm90_gmma_builder.inl" in (tmp_path / "b.ii").read_text()


def test_an_edited_real_tree_is_provisioned_again(tree):
    release, root, path = tree
    (path / "include/cutlass/cutlass.h").write_text('#error "planted"\n')
    warnings = []
    again = deps.provision(release, root, warn=warnings.append)
    assert again == path and "#error" not in (path / "include/cutlass/cutlass.h").read_text()
    assert "changed: include/cutlass/cutlass.h" in warnings[0]
    assert deps.verify_tree(path, release) is None
