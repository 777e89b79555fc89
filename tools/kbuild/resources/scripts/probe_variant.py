"""Run by a target interpreter (stages/check.py Probers): can the real
`kernels` loader load this variant here? Answers each variant path read from stdin with one line
`KBUILD-PROBE <json>`; torch and kernels are imported once. A load neither reads nor writes
bytecode in the variant (it loads what ships), and a success lists the files outside the variant
it depended on (stages/probe_memo.py) and the variant's public API (publish/api.py)."""

import atexit
import importlib.util
import inspect
import json
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

MARKER = "KBUILD-PROBE "
NO_BYTECODE = tempfile.mkdtemp(prefix="kbuild-probe-")  # stays empty
atexit.register(shutil.rmtree, NO_BYTECODE, True)


@contextmanager
def loading_what_ships(looked_up):
    """No bytecode read from or written into the variant (its __pycache__ does not ship), and
    every module spec looked up on the way recorded (kernels' check of python-depends)."""
    saved = sys.pycache_prefix, sys.dont_write_bytecode, importlib.util.find_spec

    def find_spec(name, package=None):
        spec = saved[2](name, package)
        looked_up.append(spec)
        return spec

    sys.pycache_prefix, sys.dont_write_bytecode = NO_BYTECODE, True
    importlib.util.find_spec = find_spec
    try:
        yield
    finally:
        sys.pycache_prefix, sys.dont_write_bytecode, importlib.util.find_spec = saved


def mapped_files():
    try:
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return set()
    return {line.split(None, 5)[5] for line in lines
            if len(line.split(None, 5)) == 6 and line.split(None, 5)[5].startswith("/")}


def dependencies(variant, looked_up):
    """The files outside `variant` the process has loaded: every module's file, every mapped
    file (shared libraries; a replaced one shows as `(deleted)`), every spec looked up."""
    files = {getattr(m, "__file__", None) for m in list(sys.modules.values())}
    files |= {s.origin for s in looked_up if s is not None and s.has_location}
    files |= mapped_files()
    inside = os.path.realpath(variant) + os.sep
    real = {os.path.realpath(f) for f in files if isinstance(f, str) and f}
    return sorted(f for f in real if not f.startswith(inside))


def _signature(obj):
    """{"signature": text, "params": [[name, kind, has default], ...]} of a callable (None:
    not introspectable, e.g. a builtin without a text signature)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    params = [[p.name, p.kind.name, p.default is not inspect.Parameter.empty]
              for p in sig.parameters.values()]
    return {"signature": str(sig), "params": params}


def _describe(obj):
    if inspect.isclass(obj):
        return {"kind": "class", **(_signature(obj) or {})}
    if inspect.ismodule(obj):
        return {"kind": "module"}
    if callable(obj):
        return {"kind": "function", **(_signature(obj) or {})}
    return {"kind": "value", "type": type(obj).__name__}


def _public(module, only_classes=False):
    """The module's public names: `__all__`, else what the package itself defines."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return [str(n) for n in names]
    package = module.__name__.split(".")[0]
    out = []
    for name in dir(module):
        obj = getattr(module, name, None)
        if name.startswith("_") or inspect.ismodule(obj):
            continue
        if only_classes and not inspect.isclass(obj):
            continue
        if (getattr(obj, "__module__", None) or "").split(".")[0] == package:
            out.append(name)
    return out


def public_api(module, namespace):
    """What users of the kernel call: the package's public names with their signatures, the
    layer classes (`layers`) with their `forward`, and the ops registered in its namespace with
    their schemas (the namespace itself, which holds the build id, left out)."""
    import torch

    python = {name: _describe(getattr(module, name)) if hasattr(module, name)
              else {"kind": "missing"} for name in _public(module)}
    layers = {}
    submodule = getattr(module, "layers", None)
    if inspect.ismodule(submodule):
        for name in _public(submodule, only_classes=True):
            cls = getattr(submodule, name, None)
            if inspect.isclass(cls):
                forward = getattr(cls, "forward", None)
                layers[name] = {"kind": "layer", **((_signature(forward) or {}) if forward else {})}
    ops = {}
    for full in torch._C._dispatch_get_all_op_names():
        if full.startswith(namespace + "::"):
            name, _, overload = full.partition(".")
            schema = torch._C._dispatch_find_schema_or_throw(name, overload).schema()
            ops[full.removeprefix(namespace + "::")] = str(schema).removeprefix(namespace + "::")
    return {"python": python, "layers": layers, "ops": ops}


def probe(variant: Path) -> dict:
    result = {"loadable": False, "reason": "", "ops": []}
    try:
        import torch
        from kernels import get_local_kernel
        from kernels.variants import VariantAccepted, parse_variant, resolve_variants

        meta = json.loads((variant / "metadata.json").read_text())
        backend = meta["backend"]["type"]
        try:
            _, trace = resolve_variants([parse_variant(variant.name)], backend)
            decision = trace[0] if trace else None
        except ValueError as exc:  # e.g. a CUDA variant where torch has no CUDA
            decision = None
            result["reason"] = str(exc)
            result["skipped"] = True
        if result.get("skipped"):
            pass
        elif not isinstance(decision, VariantAccepted):
            result["reason"] = getattr(decision, "reason", "not accepted by kernels on this system")
            result["skipped"] = True
        else:
            looked_up = []
            with loading_what_ships(looked_up):
                module = get_local_kernel(variant, backend=backend)
            prefix = meta["id"] + "::"
            result["ops"] = sorted(n.removeprefix(prefix) for n in torch._C._dispatch_get_all_op_names()
                                   if n.startswith(prefix))
            if meta["id"] != module.__name__:
                result["reason"] = f"module imported as {module.__name__}, not {meta['id']}"
            else:
                result["loadable"] = True
                try:  # reading the API never fails the load
                    result["api"] = public_api(module, meta["id"])
                except Exception as exc:
                    result["api_error"] = f"{type(exc).__name__}: {exc}"
                result["files"] = dependencies(variant, looked_up)
    except Exception as exc:  # reported as a check failure
        result["reason"] = f"{type(exc).__name__}: {exc}"
    return result


for line in sys.stdin:
    print(MARKER + json.dumps(probe(Path(line.rstrip("\n")))), flush=True)
