"""Real CUTLASS trees, from a wheel on PyPI (4.4.2, vendored by flashinfer-python) and from
NVIDIA's tag archive served locally (2.10.0, with the version.h CMake would have generated):
provisioned, verified, compiled against with nvcc, and provisioned again after an edit. The
trees and the probe sit at the same paths in every run, so the probe's compile is a hit of the
run's compiler cache once the same sources compiled."""

from __future__ import annotations

import re

import pytest

from cutlass_fixtures import server, skip_without_archives  # noqa: F401
from kbuild.core.errors import BuildError
from kbuild.core.runner import capture
from kbuild.stages.generate import cutlass
from kbuild.stages.generate.cutlass import sources
from kbuild.stages.compile import compiler_launcher, is_ccache
from kbuild.stages.toolchain import nvcc_candidates
from kbuild_testing import work_folder

pytestmark = pytest.mark.slow

PROBE = """\
#include <cutlass/cutlass.h>
#include <cutlass/numeric_conversion.h>
#include <cutlass/version.h>
#include <cutlass/util/host_tensor.h>
{cute}
#include <string>

static_assert(CUTLASS_MAJOR == {major} && CUTLASS_MINOR == {minor}, "wrong CUTLASS");
std::string version() {{ return cutlass::getVersionString() + cutlass::getGitRevision(); }}

__global__ void round_half(float* x) {{
  cutlass::NumericConverter<cutlass::half_t, float> to_half;
  x[threadIdx.x] = float(to_half(x[threadIdx.x]));
}}
"""


@pytest.fixture(scope="module", params=["cutlass_4_4", "cutlass_2_10"])
def tree(request, tmp_path_factory):
    release = cutlass.CUTLASS[request.param]
    root = work_folder(f"cutlass-headers-{release.version}",
                       tmp_path_factory.mktemp("cutlass-headers")) / "cache"
    if release.wheel is None:  # from the tag archive, served here
        skip_without_archives()
        server = request.getfixturevalue("server")
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(sources.URL_VAR, server.base)
            return release, root, cutlass.provision(release, root)
    try:
        return release, root, cutlass.provision(release, root)
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
        == release.version.split(".")
    for header in ("include/cutlass/gemm/device/gemm.h", "tools/util/include/cutlass/util/host_tensor.h"):
        assert (path / header).is_file(), header
    assert sorted(p.name for p in path.iterdir()) == [cutlass.STAMP, "include", "tools"]
    assert cutlass.verify_tree(path, release) is None


def test_nvcc_compiles_against_the_tree(tree):
    release, root, path = tree
    major, minor = release.minor
    tmp_path = root.parent / "probe"
    tmp_path.mkdir()
    src = tmp_path / "probe.cu"
    src.write_text(PROBE.format(major=major, minor=minor,
                                cute="#include <cute/tensor.hpp>" if major >= 3 else ""))
    includes = [f"-I{d}" for d in cutlass.include_dirs(path)]
    launcher = [cache] if is_ccache(cache := compiler_launcher()) else []  # as the builds use it
    built = capture([*launcher, nvcc(), "-std=c++17", "--expt-relaxed-constexpr", *includes, "-c",
                     str(src), "-o", str(tmp_path / "probe.o")], timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    if major < 3:
        return
    # the collective builders include .inl files, which sdists of other packages leave out
    builder = tmp_path / "builder.cu"
    builder.write_text("#include <cutlass/gemm/collective/collective_builder.hpp>\n")
    pre = capture([nvcc(), "-std=c++17", *includes, "-E", str(builder), "-o", str(tmp_path / "b.ii")],
                  timeout=600)
    assert pre.returncode == 0, pre.stderr[-3000:]
    assert "sm90_gmma_builder.inl" in (tmp_path / "b.ii").read_text()


def test_an_edited_real_tree_is_provisioned_again(tree, request):
    release, root, path = tree
    (path / "include/cutlass/cutlass.h").write_text('#error "planted"\n')
    warnings = []
    with pytest.MonkeyPatch.context() as mp:
        if release.wheel is None:
            mp.setenv(sources.URL_VAR, request.getfixturevalue("server").base)
        again = cutlass.provision(release, root, warn=warnings.append)
    assert again == path and "#error" not in (path / "include/cutlass/cutlass.h").read_text()
    assert "changed: include/cutlass/cutlass.h" in warnings[0]
    assert cutlass.verify_tree(path, release) is None
