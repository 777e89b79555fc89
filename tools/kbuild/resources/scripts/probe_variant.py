"""Run by a target interpreter (stages/check.py Probers): can the real
`kernels` loader load this variant here? Answers each variant path read from stdin with one line
`KBUILD-PROBE <json>`; torch and kernels are imported once."""

import json
import sys
from pathlib import Path

MARKER = "KBUILD-PROBE "


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
            module = get_local_kernel(variant, backend=backend)
            prefix = meta["id"] + "::"
            result["ops"] = sorted(n.removeprefix(prefix) for n in torch._C._dispatch_get_all_op_names()
                                   if n.startswith(prefix))
            if meta["id"] != module.__name__:
                result["reason"] = f"module imported as {module.__name__}, not {meta['id']}"
            else:
                result["loadable"] = True
    except Exception as exc:  # reported as a check failure
        result["reason"] = f"{type(exc).__name__}: {exc}"
    return result


for line in sys.stdin:
    print(MARKER + json.dumps(probe(Path(line.rstrip("\n")))), flush=True)
