"""The design sweeps of gpu/tune compile and list their variants (timing them needs a GPU)."""

import ctypes
import shutil
import subprocess

import pytest

from kbuild_testing import REPO, cached

SWEEPS = {"img2gray": 72, "activation": 216}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("name", list(SWEEPS))
def test_sweep_compiles_and_names_its_variants(name, tmp_path):
    lib, obj = tmp_path / f"{name}.so", tmp_path / f"{name}.o"
    # gpu/tune/tune.py's flags; compiled (through the compiler cache) and linked in two steps.
    subprocess.run(cached(["nvcc", "-O3", "-arch=sm_90", "-Xcompiler", "-fPIC", "-c", "-o", str(obj),
                           str(REPO / "gpu" / "tune" / f"{name}_variants.cu")]), check=True)
    subprocess.run(["nvcc", "-arch=sm_90", "-shared", "-o", str(lib), str(obj)], check=True)
    dll = ctypes.CDLL(str(lib))
    dll.variant_name.restype = ctypes.c_char_p
    names = [dll.variant_name(i).decode() for i in range(dll.variant_count())]
    assert len(names) == SWEEPS[name] == len(set(names))
    assert all(n.count("/") >= 4 for n in names)
