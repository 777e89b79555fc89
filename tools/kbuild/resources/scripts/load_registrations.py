"""Run by the target interpreter: load a freshly linked extension so its static registrations
(TORCH_LIBRARY_EXPAND) run, and print JSON {"ok": ..., "error": ...}.

    python load_registrations.py EXTENSION.so TORCH_LIB_DIR

torch's C++ libraries are loaded directly (a fraction of a second) instead of `import torch`
(seconds); an extension that needs more than they give is retried after a real `import torch`.
A registration error (c10::Error thrown by a static initialiser) aborts this process: the
caller reads torch's message from stderr.
"""

import ctypes
import importlib.util
import json
import os
import sys

so, lib_dir = sys.argv[1], sys.argv[2]
LIBS = ("libc10.so", "libc10_cuda.so", "libtorch_cpu.so", "libtorch_cuda.so", "libtorch.so")


def load_direct() -> None:
    for name in LIBS:
        path = os.path.join(lib_dir, name)
        if os.path.exists(path):
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    ctypes.CDLL(so)


def load_with_torch() -> None:
    import torch  # noqa: F401

    name = os.path.basename(so).split(".")[0]
    spec = importlib.util.spec_from_file_location(name, so)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


try:
    try:
        load_direct()
    except OSError:
        load_with_torch()
    result = {"ok": True}
except Exception as exc:  # reported by the builder
    result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
print(json.dumps(result))
