"""Run by the target interpreter (stages/check/loadcheck.py Loader): load a freshly linked extension so
its static registrations (TORCH_LIBRARY_EXPAND) run.

    python load_registrations.py TORCH_LIB_DIR     then, on stdin, the path of EXTENSION.so

torch's C++ libraries are loaded directly at start-up (a fraction of a second, instead of the
seconds of `import torch`), while the builder still compiles; the extension named on stdin is
loaded then, and one line `KBUILD-LOAD {"ok": ..., "error": ...}` answers. An extension that
needs more than those libraries give is retried after a real `import torch`. A registration
error (c10::Error thrown by a static initialiser) aborts this process: the caller reads torch's
message from stderr.
"""

import ctypes
import importlib.util
import json
import os
import sys

MARKER = "KBUILD-LOAD "
LIBS = ("libc10.so", "libc10_cuda.so", "libtorch_cpu.so", "libtorch_cuda.so", "libtorch.so")
lib_dir = sys.argv[1]


def load_libs() -> bool:
    try:
        for name in LIBS:
            path = os.path.join(lib_dir, name)
            if os.path.exists(path):
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return False
    return True


def load(so: str, libs_loaded: bool) -> None:
    if libs_loaded:
        try:
            ctypes.CDLL(so)
            return
        except OSError:
            pass
    import torch  # noqa: F401

    name = os.path.basename(so).split(".")[0]
    spec = importlib.util.spec_from_file_location(name, so)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


libs_loaded = load_libs()
so = sys.stdin.readline().rstrip("\n")
if so:
    try:
        load(so, libs_loaded)
        result = {"ok": True}
    except Exception as exc:  # reported by the builder
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    print(MARKER + json.dumps(result), flush=True)
