"""Run by a target interpreter (stages/devtest/__init__.py): the variants of a build folder that the
`kernels` loader there would load, best first, and its reason for each one it would not.
Answers with one line `KBUILD-SELECT <json object>` ({"error": ...} when `kernels` cannot be
imported); anything else the interpreter prints is not the answer."""

import json
import sys
from pathlib import Path

MARKER = "KBUILD-SELECT "

try:
    from kernels.variants import get_variants_local, resolve_variants
except Exception as e:  # noqa: BLE001 (any import failure: the caller falls back to names)
    print(MARKER + json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
    sys.exit(0)

chosen, trace = resolve_variants(get_variants_local(Path(sys.argv[1])))
rejected = {d.variant.variant_str: d.reason for d in trace if hasattr(d, "reason")}
print(MARKER + json.dumps({"chosen": [v.variant_str for v in chosen], "rejected": rejected}),
      flush=True)
