"""Run by a target interpreter (stages/check/__init__.py Probers): can the real
`kernels` loader load this variant here? Answers each variant path read from stdin with one line
`KBUILD-PROBE <json>`; torch and kernels are imported once. A load neither reads nor writes
bytecode in the variant (it loads what ships), and a success lists the files outside the variant
it depended on (stages/check/probe_memo.py) and the variant's public API (publish/api.py)."""

import atexit
import enum
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


# The API record (publish/api.py compares two): one dict per public symbol, so a key added later
# is simply absent from older records (compared as "not compared", said so).
KERNELIZE = {"has_backward": True, "can_torch_compile": False}  # kernelize reads, its defaults
PLAIN = (type(None), bool, int, float, complex, str, bytes)
MAX_CONSTANT = 1000  # characters; a longer constant is compared by its type only
MAX_SUBMODULES = 200


def _constant_text(value, depth=0):
    kind = type(value)
    if kind in PLAIN:
        return repr(value)
    if isinstance(value, enum.Enum):
        return f"{kind.__qualname__}.{value.name}"
    torch = sys.modules.get("torch")
    if torch is not None and kind in (torch.dtype, torch.device, torch.layout,
                                      torch.memory_format):
        return repr(value)
    if depth > 3 or kind not in (tuple, list, set, frozenset, dict) or len(value) > 64:
        return None
    if kind is dict:
        pairs = [(_constant_text(k, depth + 1), _constant_text(v, depth + 1))
                 for k, v in value.items()]
        return None if None in {x for p in pairs for x in p} else (
            "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}")
    items = [_constant_text(v, depth + 1) for v in value]
    if None in items:
        return None
    if kind in (set, frozenset):  # in a stable order (str hashes differ between processes)
        return f"{kind.__name__}({{{', '.join(sorted(items))}}})"
    text = ", ".join(items)
    return f"({text},)" if kind is tuple and len(items) == 1 else (
        f"({text})" if kind is tuple else f"[{text}]")


def _constant(value):
    """A plain constant (None, bool, number, str, bytes, enum member, torch dtype or device,
    and small containers of them) as text compared as written; None for any other value,
    which is compared by its type only."""
    try:
        text = _constant_text(value)
    except Exception:  # e.g. an int too long to print
        return None
    return text if text is not None and len(text) <= MAX_CONSTANT else None


def _signature(obj):
    """{"signature": text, "params": [[name, kind, has default], ...], "defaults": {name: text
    or None}} of a callable (None: not introspectable, e.g. a builtin without a text
    signature)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    params = [[p.name, p.kind.name, p.default is not inspect.Parameter.empty]
              for p in sig.parameters.values()]
    defaults = {p.name: _constant(p.default) for p in sig.parameters.values()
                if p.default is not inspect.Parameter.empty}
    return {"signature": str(sig), "params": params, "defaults": defaults}


def _kernelize(obj):
    """The flags `kernels.kernelize` reads of a layer (or of a function it wraps as one), with
    its defaults for an absent flag (None: unreadable)."""
    flags = {}
    for name, default in KERNELIZE.items():
        try:
            flags[name] = bool(getattr(obj, name, default))
        except Exception:
            flags[name] = None
    return flags


def _describe(obj):
    if inspect.isclass(obj):
        return {"kind": "class", **(_signature(obj) or {})}  # layers: public_api's own
    if inspect.ismodule(obj):
        return {"kind": "module"}
    if callable(obj):
        return {"kind": "function", **(_signature(obj) or {}), "kernelize": _kernelize(obj)}
    return {"kind": "value", "type": type(obj).__name__, "value": _constant(obj)}


def _public(module, only_classes=False):
    """The module's public names: `__all__`, else what the package itself defines and the
    public names bound to plain constants."""
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
        if ((getattr(obj, "__module__", None) or "").split(".")[0] == package
                or (not only_classes and _constant(obj) is not None)):
            out.append(name)
    return out


def _submodules(module):
    """The package's public submodules users reach as attributes (`kernel.utils`,
    `kernel.utils.sub`), by name relative to the package; one with a private part (`_impl`)
    or that the package's import does not load is not among them."""
    root, found, todo = module.__name__, {}, [module]
    while todo and len(found) < MAX_SUBMODULES:
        current = todo.pop(0)
        for name in sorted(dir(current)):
            if name.startswith("_"):
                continue
            try:
                obj = getattr(current, name)
            except Exception:
                continue
            full = getattr(obj, "__name__", None) if inspect.ismodule(obj) else None
            if not isinstance(full, str) or not full.startswith(root + "."):
                continue
            relative = full[len(root) + 1:]
            if relative not in found and not any(p.startswith("_") for p in relative.split(".")):
                found[relative] = obj
                todo.append(obj)
    return found


def _names(module, prefix=""):
    return {prefix + name: _describe(getattr(module, name)) if hasattr(module, name)
            else {"kind": "missing"} for name in _public(module)}


def public_api(module, namespace):
    """What users of the kernel call: the package's public names and those of its public
    submodules, each callable with its signature and defaults (a function also with the flags
    `kernels.kernelize` reads of one it uses as a layer), each constant with its value; the
    layer classes (`layers`) with their `forward` and kernelize flags; and the ops registered
    in its namespace with their schemas (the namespace itself, which holds the build id, left
    out)."""
    import torch

    python = _names(module)
    submodules = {}
    for relative, submodule in _submodules(module).items():
        submodules[relative] = {"kind": "module"}
        submodules.update(_names(submodule, relative + "."))
    layers = {}
    submodule = getattr(module, "layers", None)
    if inspect.ismodule(submodule):
        for name in _public(submodule, only_classes=True):
            cls = getattr(submodule, name, None)
            if inspect.isclass(cls):
                forward = getattr(cls, "forward", None)
                layers[name] = {"kind": "layer", **((_signature(forward) or {}) if forward else {}),
                                "kernelize": _kernelize(cls)}
    ops = {}
    for full in torch._C._dispatch_get_all_op_names():
        if full.startswith(namespace + "::"):
            name, _, overload = full.partition(".")
            schema = torch._C._dispatch_find_schema_or_throw(name, overload).schema()
            ops[full.removeprefix(namespace + "::")] = str(schema).removeprefix(namespace + "::")
    return {"python": python, "submodules": submodules, "layers": layers, "ops": ops}


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
