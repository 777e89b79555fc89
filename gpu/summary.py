"""Markdown summary of benchmark JSON files (kbuild/benchlib.py format), with issue 6's targets.

    python3 gpu/summary.py RESULTS_DIR [--out FILE]

One table per kernel (GB/s and fraction of the copy bandwidth per implementation, ours'
speedup over the fastest baseline), then each H200 target of issue 6 as PASS / MISS with the
measured figure. Reads every *.json in RESULTS_DIR.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

OURS = "ours"


def _num(case: str) -> tuple[int, int] | None:
    try:
        h, w = case.split("x")
        return int(h), int(w)
    except ValueError:
        return None


def table(res: dict) -> list[str]:
    rows = res["rows"]
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    impls = [OURS] + [i for i in impls if i != OURS] if OURS in impls else impls
    copy = res.get("copy", {}).get("gbps")
    lines = [f"### {res['kernel']}: {res.get('device_name')}, copy {copy:.0f} GB/s"
             if copy else f"### {res['kernel']}: {res.get('device_name')}",
             "", f"GB/s (fraction of copy) per implementation; bytes = {res.get('bytes_formula')}; "
             f"{res.get('timer')}; variant {res.get('variant')}; torch {res.get('torch')}", "",
             "| case | " + " | ".join(impls) + " | ours vs best baseline |",
             "|---" * (len(impls) + 2) + "|"]
    keys = list(dict.fromkeys((r["group"], r["case"]) for r in rows))
    for group, case in keys:
        cells, ours_ms, best = [], None, None
        for impl in impls:
            r = next((r for r in rows if (r["group"], r["case"], r["impl"]) == (group, case, impl)),
                     None)
            if r is None or not r.get("gbps"):
                cells.append("error" if r is not None and r.get("error") else "-")
                continue
            mark = "" if r.get("ok") else " (WRONG)"
            g = f"{r['gbps']:.0f}" if r["gbps"] >= 100 else f"{r['gbps']:.3g}"
            cells.append(f"{g} ({r['x_copy']:.2f}){mark}" if r.get("x_copy") else f"{g}{mark}")
            if impl == OURS:
                ours_ms = r["median_ms"]
            elif best is None or r["median_ms"] < best[1]:
                best = (impl, r["median_ms"])
        vs = f"{best[1] / ours_ms:.2f}x ({best[0]})" if ours_ms and best else "-"
        label = f"{group} {case}" if group else case
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {vs} |")
    return lines


def targets(res: dict) -> list[tuple[str, bool, str]]:
    """(target, met, measured) for issue 6's H200 targets that this result covers."""
    out = []
    ours = {(r["group"], r["case"]): r for r in res["rows"] if r["impl"] == OURS and r.get("gbps")}
    others = [r for r in res["rows"] if r["impl"] != OURS and r.get("median_ms")]

    def speedup(r, impl):
        return (r.get("speedup") or {}).get(impl)

    kernel = res["kernel"]
    if kernel == "img2gray":
        for (_, case), r in ours.items():
            hw = _num(case)
            if not hw:
                continue
            px = hw[0] * hw[1]
            if px >= 8191 * 8191:
                out.append((f"img2gray {case} >= 0.95x copy", r["x_copy"] >= 0.95,
                            f"{r['x_copy']:.3f}x"))
            elif px >= 4095 * 4097:
                out.append((f"img2gray {case} >= 0.92x copy", r["x_copy"] >= 0.92,
                            f"{r['x_copy']:.3f}x"))
            elif case == "1080x1920":
                base = [o for o in others if o["case"] == case]
                if base:
                    fastest = min(base, key=lambda o: o["median_ms"])
                    s = fastest["median_ms"] / r["median_ms"]
                    out.append((f"img2gray {case} no slower than the fastest baseline", s >= 1.0,
                                f"{s:.2f}x vs {fastest['impl']}"))
    elif kernel == "activation":
        for (op, case), r in ours.items():
            s = speedup(r, "eager")
            if case.startswith("2^28"):
                out.append((f"{op} {case} >= 0.90x copy", r["x_copy"] >= 0.90, f"{r['x_copy']:.3f}x"))
            if s is not None and case.startswith("2^24"):
                out.append((f"{op} {case} >= 1.1x eager", s >= 1.1, f"{s:.2f}x"))
            if s is not None:
                out.append((f"{op} {case} never slower than eager", s >= 1.0, f"{s:.2f}x"))
    elif kernel == "rmsnorm":
        for (_, case), r in ours.items():
            s = speedup(r, "F.rms_norm")
            if s is not None:
                need = 1.1 if case == "16384x8192" else 1.0
                out.append((f"rmsnorm {case} >= {need}x F.rms_norm", s >= need, f"{s:.2f}x"))
            if case == "65536x4096":
                out.append((f"rmsnorm {case} >= 0.90x copy", r["x_copy"] >= 0.90, f"{r['x_copy']:.3f}x"))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    results = []
    for path in sorted(args.results.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except ValueError as e:
            print(f"skipping {path.name}: {e}", file=sys.stderr)
            continue
        if isinstance(data, dict) and "rows" in data and "kernel" in data:
            results.append(data)
    if not results:
        print(f"no benchmark results in {args.results}", file=sys.stderr)
        return 1
    lines = ["## Benchmarks", ""]
    checks = []
    for res in results:
        lines += table(res) + [""]
        if res.get("device") == "cuda":  # the targets are for the GPU
            checks += targets(res)
    if checks:
        met = sum(ok for _, ok, _ in checks)
        lines += [f"## Targets (issue 6, H200): {met} of {len(checks)} met", ""]
        lines += [f"- {'PASS' if ok else 'MISS'} {name}: {got}" for name, ok, got in checks]
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
