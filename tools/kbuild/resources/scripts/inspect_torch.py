"""Run by the target interpreter: prints what the builder needs to know about its torch as JSON.

Reads torch's files instead of importing it (an import costs seconds, this a few ms)."""

import importlib.util
import json
import os
import platform
import sys
import sysconfig

spec = importlib.util.find_spec("torch")
if spec is None or not spec.origin:
    print(json.dumps({"error": "cannot import torch: no module named 'torch'"}))
    sys.exit(0)
root = os.path.dirname(spec.origin)
version = {}
try:
    with open(os.path.join(root, "version.py"), encoding="utf-8") as f:
        exec(f.read(), version)
except OSError as exc:
    print(json.dumps({"error": f"cannot import torch: broken installation ({exc})"}))
    sys.exit(0)
with open(os.path.join(root, "utils", "cpp_extension.py"), encoding="utf-8") as f:
    cxx_std = 20 if "-std=c++20" in f.read() else 17
with open(os.path.join(root, "lib", "libc10.so"), "rb") as f:
    cxx11_abi = b"B5cxx11" in f.read()  # std::__cxx11 names appear only under the new ABI

print(json.dumps({
    "python": sys.executable,
    "python_version": "%d.%d" % sys.version_info[:2],
    "python_include": sysconfig.get_paths()["include"],
    "torch_version": version["__version__"],
    "torch_root": root,
    "cuda": version.get("cuda"),
    "hip": version.get("hip"),
    "cxx11_abi": cxx11_abi,
    "cxx_std": cxx_std,
    "machine": platform.machine(),
    "system": platform.system().lower(),
    "site_packages": sysconfig.get_paths()["purelib"],
}))
