"""Run by a target interpreter (stages/check/__init__.py): what a `kernels` load there depends on, without
importing torch: the interpreter, its module path, and for torch, kernels and huggingface_hub
their version, where they are imported from, and a fingerprint of their installed files."""

import hashlib
import importlib.metadata as metadata
import importlib.util
import json
import os
import sys


def fingerprint(name):
    found = {"version": None, "record": None, "origin": None}
    try:
        dist = metadata.distribution(name)
        found["version"] = dist.version
        found["record"] = hashlib.sha256((dist.read_text("RECORD") or "").encode()).hexdigest()
    except metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec(name)
    if spec is not None and spec.origin:
        st = os.stat(spec.origin)
        found["origin"] = [os.path.realpath(spec.origin), st.st_size, st.st_mtime_ns]
    return found


print(json.dumps({"python": os.path.realpath(sys.executable), "version": sys.version,
                  "path": sys.path,
                  "packages": {n: fingerprint(n) for n in ("torch", "kernels", "huggingface_hub")}}))
