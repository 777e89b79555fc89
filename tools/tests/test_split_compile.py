"""nvcc 13's --split-compile, for real: a small CUDA file compiled with and without it gives an
object with the same kernels and the same GPU code (SASS, read back with cuobjdump), the flag
recorded in the object; and the compile line kbuild generates for a local build of img2gray on
this machine carries the split it printed."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from kbuild.stages import compile as compile_mod, generate, pipeline
from kbuild.stages.toolchain import find_cuda
from kbuild.stages.torch_install import read_torch_install

pytestmark = pytest.mark.slow

KERNELS = r"""
template <int N> __global__ void scale(float* x, float a) {
  float acc = 0.f;
  #pragma unroll
  for (int i = 0; i < N; ++i) acc += a * x[threadIdx.x + i * blockDim.x];
  x[threadIdx.x] = acc;
}
template __global__ void scale<1>(float*, float);
template __global__ void scale<8>(float*, float);
template __global__ void scale<32>(float*, float);
template __global__ void scale<96>(float*, float);
"""


def cuobjdump(nvcc: Path, cuda_python: str) -> str | None:
    """The toolkit's cuobjdump, else the one triton ships in the CUDA environment."""
    site = subprocess.run([cuda_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True).stdout.strip()
    for candidate in (nvcc.parent / "cuobjdump", Path(site) / "triton/backends/nvidia/bin/cuobjdump"):
        if candidate.is_file():
            return str(candidate)
    return shutil.which("cuobjdump")


def compile_cu(nvcc: Path, src: Path, out: Path, *extra: str) -> bytes:
    proc = subprocess.run([str(nvcc), "-c", str(src), "-o", str(out), "-O3",
                           "--generate-code=arch=compute_90,code=[sm_90]", *extra],
                          capture_output=True, text=True, cwd=src.parent)
    assert proc.returncode == 0, proc.stderr
    return out.read_bytes()


def test_split_compile_keeps_the_kernels_and_their_sass(tmp_path, cuda_python):
    nvcc = find_cuda(read_torch_install(cuda_python)).nvcc
    src = tmp_path / "kernels.cu"
    src.write_text(KERNELS)
    plain = compile_cu(nvcc, src, tmp_path / "plain.o")
    split = compile_cu(nvcc, src, tmp_path / "split.o", "--split-compile=2")
    assert b"-split-compile" not in plain and b"-split-compile" in split  # nvcc took it
    tool = cuobjdump(nvcc, cuda_python)
    if tool is None:
        pytest.skip("no cuobjdump (neither in the toolkit nor from triton) to compare the SASS")
    sass = {name: subprocess.run([tool, "-sass", str(tmp_path / f"{name}.o")], capture_output=True,
                                 text=True, check=True).stdout for name in ("plain", "split")}
    functions = [line for line in sass["plain"].splitlines() if "Function :" in line]
    assert len(functions) == 4
    assert sass["split"] == sass["plain"]


def test_a_local_build_compiles_with_the_split_it_prints(work, cuda_python, monkeypatch):
    from kbuild_testing import copy_project
    monkeypatch.delenv(compile_mod.NVCC_SPLIT_VAR, raising=False)
    monkeypatch.delenv(compile_mod.NVCC_THREADS_VAR, raising=False)
    project = copy_project(work / "img2gray")
    (plan,) = pipeline.plans(project, backends=["cuda"], python=cuda_python,
                             local_capabilities=["9.0"])
    how = compile_mod.split(plan, cores=2, memory_gib=20)
    assert how.nvcc_split == 2 and "× split 2" in str(how)  # one .cu, one capability, 2 cores
    monkeypatch.setattr(compile_mod, "_cores", lambda: 2)
    src = generate.generate(plan)
    build = src / generate.BUILD_FOLDER
    args = compile_mod.configure_args(plan, src, build)
    compile_mod.configure(args, src, build, src / "build.log", compile_mod.cache_env(None, project))
    lines = [e["command"] for e in json.loads((build / "compile_commands.json").read_text())
             if e["file"].endswith(".cu")]
    assert lines and all("--split-compile=2" in line for line in lines)
    monkeypatch.setenv(compile_mod.NVCC_SPLIT_VAR, "off")
    assert "-DKB_NVCC_SPLIT=1" in compile_mod.configure_args(plan, src, build)
