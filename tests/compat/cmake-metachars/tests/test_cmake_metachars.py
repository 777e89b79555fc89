"""Values with ${}, $ENV{}, quotes, parentheses reach the compiler literally."""

import json
import os
from pathlib import Path

import torch
from kernels import get_local_kernel

PROJECT = Path(__file__).resolve().parents[1]
BACKEND = os.environ.get("KBUILD_COMPAT_BACKEND") or ("cuda" if torch.cuda.is_available() else "cpu")
DEVICE = "cuda" if BACKEND == "cuda" else "cpu"
kernel = get_local_kernel(PROJECT, backend=BACKEND)


def variant_meta():
    variant = Path(kernel.__file__).parent
    return variant, json.loads((variant / "metadata.json").read_text())


def test_ops_live_in_the_build_namespace():
    _, meta = variant_meta()
    assert kernel._ops.ops.name == meta["id"]
    assert kernel._ops.add_op_namespace_prefix("x") == meta["id"] + "::x"


def test_scale():
    x = torch.arange(10, dtype=torch.float32, device=DEVICE)
    torch.testing.assert_close(kernel.scale(x, 2.5), x * 2.5)


def test_flags_reached_the_compiler_literally():
    import ctypes

    variant, meta = variant_meta()
    lib = ctypes.CDLL(str(variant / f"{meta['id']}.abi3.so"))
    probe = (ctypes.c_char * 256).in_dll(lib, "kb_probe").value.decode()
    assert probe == '${HOME}|$ENV{PATH}|it\'s a "q" ) # x|)execute_process(COMMAND touch kb-pwned)'
    lib.kb_kernel_probe_c.restype = ctypes.c_char_p
    assert lib.kb_kernel_probe_c().decode() == "$(touch kb-pwned-too)|(1>0)|1,2"
