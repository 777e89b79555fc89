"""A benchmark's result (see harness.py): its JSON file and its table."""

from __future__ import annotations

import json
import math
from pathlib import Path

OURS = "ours"  # the kernel's own implementation; the others are baselines


def fmt(v, spec: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


def write_json(result: dict, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{result['kernel']}.json"
    path.write_text(json.dumps(result, indent=1, allow_nan=True) + "\n")
    return path


def print_table(result: dict) -> None:
    """Rich table (plain text when rich is missing): one line per (case, impl)."""
    copy = result.get("copy", {})
    title = (f"{result['kernel']} on {result['device_name']} ({result['device']}), "
             f"{result.get('variant') or '?'}\ncopy bandwidth {fmt(copy.get('gbps'), '.1f')} "
             f"GB/s; bytes = {result['bytes_formula']}; x copy = GB/s / copy GB/s; per call = "
             "wall clock, calls back to back")
    head = ["case", "impl", "us per call", "GB/s", "x copy", "flushed x copy", "ours faster by",
            "ok"]
    lines = []
    for r in result["rows"]:
        case = f"{r['group']} {r['case']}" if r["group"] else r["case"]
        if r.get("kind") == "latency":
            case += " (decode)"
        if r["impl"] == OURS:
            vs = ", ".join(f"{k} {v:.2f}x" for k, v in r["speedup"].items())
            faster = f"vs {vs}" if vs else "-"
        else:
            faster = fmt(r["speedup"].get(OURS) and 1 / r["speedup"][OURS], ".2f")
            faster = faster + "x" if faster != "-" else faster
        ok = "yes" if r["ok"] else ("ERROR" if r["error"] else "MISMATCH")
        per_call = r["median_ms"] * 1e3 if r["median_ms"] else None
        lines.append([case, r["impl"], fmt(per_call, ".2f"), fmt(r["gbps"], ".1f"),
                      fmt(r["x_copy"], ".3f"), fmt(r.get("flushed_x_copy"), ".3f"), faster, ok])
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
        for line in [head, *lines]:
            print("  ".join(str(x).ljust(w) for x, w in zip(line, widths)))
        return
    table = Table(*head)
    prev = None
    for line, r in zip(lines, result["rows"]):
        if prev is not None and line[0] != prev:
            table.add_section()
        prev = line[0]
        style = "bold" if r["impl"] == OURS else None
        table.add_row(*line, style=style)
    console = Console(width=max(Console().width, 120), soft_wrap=False)
    console.print(title, highlight=False, markup=False)
    console.print(table)
