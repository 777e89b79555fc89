"""Run by the target interpreter: prints what the builder needs to know about its torch as JSON."""

import json
import os
import platform
import sys
import sysconfig

try:
    import torch
except ImportError as exc:  # reported by the builder as a clear error
    print(json.dumps({"error": f"cannot import torch: {exc}"}))
    sys.exit(0)

root = os.path.dirname(torch.__file__)
cpp_ext = os.path.join(root, "utils", "cpp_extension.py")
with open(cpp_ext, encoding="utf-8") as f:
    cxx_std = 20 if "-std=c++20" in f.read() else 17

print(json.dumps({
    "python": sys.executable,
    "python_version": "%d.%d" % sys.version_info[:2],
    "python_include": sysconfig.get_paths()["include"],
    "torch_version": torch.__version__,
    "torch_root": root,
    "cuda": torch.version.cuda,
    "hip": getattr(torch.version, "hip", None),
    "cxx11_abi": bool(torch.compiled_with_cxx11_abi()),
    "cxx_std": cxx_std,
    "machine": platform.machine(),
    "system": platform.system().lower(),
    "site_packages": sysconfig.get_paths()["purelib"],
}))
