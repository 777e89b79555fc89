"""Markdown summary of benchmark JSON files (tools/kbuild_bench format) and of
benchmarks/e2e_llama.py's result, with the H200 targets as PASS / MISS.

    python3 gpu/summary.py RESULTS_DIR [--out FILE]

Per kernel: a bandwidth table (calls back to back: GB/s and fraction of the copy bandwidth per
implementation, the flushed single call of ours as an extra column, ours vs the fastest
baseline) and a latency table (microseconds per call at decode sizes, calls back to back,
host work included). Then the end-to-end model, then every target with its measured figure.
Reads every *.json in RESULTS_DIR.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

OURS = "ours"


def _num(case: str) -> tuple[int, int] | None:
    try:
        h, w = case.split()[0].split("x")
        return int(h), int(w)
    except ValueError:
        return None


def _kind(r: dict) -> str:
    return r.get("kind") or "bandwidth"


def _impls(rows: list[dict]) -> list[str]:
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    return [OURS] + [i for i in impls if i != OURS] if OURS in impls else impls


def bandwidth_table(res: dict, rows: list[dict]) -> list[str]:
    impls = _impls(rows)
    lines = ["| case | " + " | ".join(impls) + " | ours flushed | ours vs best baseline |",
             "|---" * (len(impls) + 3) + "|"]
    for group, case in dict.fromkeys((r["group"], r["case"]) for r in rows):
        cells, ours, best = [], None, None
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
                ours = r
            elif best is None or r["median_ms"] < best["median_ms"]:
                best = r
        flushed = (f"{ours['flushed_gbps']:.0f} ({ours['flushed_x_copy']:.2f})"
                   if ours and ours.get("flushed_x_copy") else "-")
        vs = (f"{best['median_ms'] / ours['median_ms']:.2f}x ({best['impl']})"
              if ours and best else "-")
        label = f"{group} {case}" if group else case
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {flushed} | {vs} |")
    return lines


def latency_table(res: dict, rows: list[dict]) -> list[str]:
    impls = _impls(rows)
    others = [i for i in impls if i != OURS]
    lines = ["| case | " + " | ".join(f"{i} us" for i in impls) + " | "
             + " | ".join(f"ours vs {i}" for i in others) + " |",
             "|---" * (len(impls) + len(others) + 1) + "|"]
    for group, case in dict.fromkeys((r["group"], r["case"]) for r in rows):
        cells, ratios = [], []
        by = {r["impl"]: r for r in rows if (r["group"], r["case"]) == (group, case)}
        for impl in impls:
            r = by.get(impl)
            ok = r is not None and r.get("median_ms")
            cells.append(f"{r['median_ms'] * 1e3:.2f}" + ("" if r["ok"] else " (WRONG)")
                         if ok else "-")
        ours = by.get(OURS)
        for impl in others:
            s = (ours or {}).get("speedup", {}).get(impl)
            ratios.append(f"{s:.2f}x" if s else "-")
        label = f"{group} {case}" if group else case
        lines.append(f"| {label} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    return lines


def kernel_section(res: dict) -> list[str]:
    copy = res.get("copy", {}).get("gbps")
    head = (f"### {res['kernel']}: {res.get('device_name')}, copy {copy:.0f} GB/s"
            if copy else f"### {res['kernel']}: {res.get('device_name')}")
    lines = [head, "", f"{res.get('timer')}; bytes = {res.get('bytes_formula')}; variant "
             f"{res.get('variant')}; torch {res.get('torch')}", ""]
    bw = [r for r in res["rows"] if _kind(r) == "bandwidth"]
    lat = [r for r in res["rows"] if _kind(r) == "latency"]
    if bw:
        lines += ["Bandwidth, calls back to back: GB/s (fraction of copy)", ""]
        lines += bandwidth_table(res, bw) + [""]
    if lat:
        lines += ["Per call at decode sizes, back to back, host included: microseconds "
                  "(ours vs X = X's time / ours)", ""]
        lines += latency_table(res, lat) + [""]
    return lines


def e2e_section(res: dict) -> list[str]:
    v = res["variants"]
    lines = [f"### End to end: {res['model']}, {res['device_name']}, torch {res['torch']}, "
             f"transformers {res['transformers']}", "",
             f"prefill 1x{res['prompt_tokens']}, greedy decode {res['new_tokens']} new tokens; "
             f"{res['timer']}", "",
             "| variant | prefill ms | vs its baseline | decode ms/token | vs its baseline | "
             "decode vs plain | tokens | our layers |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in v.items():
        same = ("identical" if r["tokens_identical"]
                else f"differ from token {r['first_difference']}")
        layers = ", ".join(f"{k} x{n}" for k, n in r.get("kernelized_layers", {}).items()) or "-"
        lines.append(f"| {name} | {r['prefill_ms']:.3f} | {r['prefill_speedup']:.2f}x "
                     f"({r['baseline']}) | {r['decode_ms_per_token']:.3f} | "
                     f"{r['decode_speedup']:.2f}x | {r['vs_plain_decode_speedup']:.2f}x | "
                     f"{same} (vs {r['baseline']}) | {layers} |")
    if res.get("compiled"):
        lines += ["", "torch.compile(mode=\"reduce-overhead\"), forward without KV cache:", "",
                  "| model | tokens | ms | vs plain compiled | fullgraph | compile s |",
                  "|---|---|---|---|---|---|"]
        for name, shapes in res["compiled"].items():
            for n, e in shapes.items():
                lines.append(f"| {name} | {n} | {e['median_ms']:.3f} | {e['vs_plain']:.2f}x | "
                             f"{e['fullgraph']} | {e['compile_s']:.0f} |")
    return lines + [""]


def _speedup(r: dict, impl: str) -> float | None:
    return (r.get("speedup") or {}).get(impl)


def targets(res: dict) -> list[tuple[str, bool, str]]:
    """(target, met, measured) for the H200 targets this result covers."""
    out = []
    if "variants" in res:  # the end-to-end model
        v = res["variants"]
        k, f = v["kernelized"], v["F.rms_norm"]
        out.append(("e2e kernelized decode >= 1.2x plain", k["decode_speedup"] >= 1.2,
                    f"{k['decode_speedup']:.2f}x"))
        s = f["decode_ms_per_token"] / k["decode_ms_per_token"]
        out.append(("e2e kernelized decode no slower than F.rms_norm-patched", s >= 1.0,
                    f"{s:.2f}x"))
        for name in ("kernelized", "gated-kernelized"):
            if name in v:
                out.append((f"e2e {name}: generated tokens identical to {v[name]['baseline']}",
                            v[name]["tokens_identical"],
                            "identical" if v[name]["tokens_identical"]
                            else f"first difference at {v[name]['first_difference']}"))
        if "gated-kernelized" in v:
            g = v["gated-kernelized"]
            out.append(("e2e gated-kernelized decode >= 1.2x gated plain",
                        g["decode_speedup"] >= 1.2, f"{g['decode_speedup']:.2f}x"))
        for n, e in ((res.get("compiled") or {}).get("kernelized") or {}).items():
            out.append((f"e2e compiled kernelized no slower than compiled plain, {n} tokens",
                        e["vs_plain"] >= 1.0, f"{e['vs_plain']:.3f}x"))
        return out

    kernel = res["kernel"]
    ours = {(r["group"], r["case"]): r for r in res["rows"]
            if r["impl"] == OURS and r.get("gbps")}
    for (group, case), r in ours.items():
        label = f"{kernel} {group + ' ' if group else ''}{case}"
        if _kind(r) == "latency":
            if kernel == "rmsnorm":
                s = _speedup(r, "F.rms_norm")
                if s is not None:
                    out.append((f"{label} per call <= F.rms_norm", s >= 1.0, f"{s:.2f}x"))
                s = _speedup(r, "eager")
                if s is not None:
                    out.append((f"{label} per call >= 1.5x transformers' RMSNorm", s >= 1.5,
                                f"{s:.2f}x"))
            elif kernel == "activation":
                s = _speedup(r, "eager")
                need = 1.5 if group == "silu_and_mul" else 1.0
                if s is not None:
                    out.append((f"{label} per call >= {need}x eager", s >= need, f"{s:.2f}x"))
                layer = next((x for x in res["rows"] if (x["group"], x["case"], x["impl"])
                              == (group, case, "layer") and x.get("speedup")), None)
                if layer and _speedup(layer, "eager") is not None:
                    s = _speedup(layer, "eager")
                    out.append((f"{label} layer per call >= {need}x eager", s >= need,
                                f"{s:.2f}x"))
            continue
        if kernel == "img2gray":
            hw = _num(case)
            px = hw[0] * hw[1] if hw else 0
            if px >= 8191 * 8191:
                out.append((f"{label} >= 0.95x copy", r["x_copy"] >= 0.95, f"{r['x_copy']:.3f}x"))
            elif px >= 4095 * 4097:
                out.append((f"{label} >= 0.92x copy", r["x_copy"] >= 0.92, f"{r['x_copy']:.3f}x"))
            elif case == "1080x1920":
                base = [o for o in res["rows"] if o["case"] == case and o["impl"] != OURS
                        and o.get("median_ms") and _kind(o) == "bandwidth"]
                if base:
                    fastest = min(base, key=lambda o: o["median_ms"])
                    s = fastest["median_ms"] / r["median_ms"]
                    out.append((f"{label} no slower than the fastest baseline", s >= 1.0,
                                f"{s:.2f}x vs {fastest['impl']}"))
        elif kernel == "activation":
            s = _speedup(r, "eager")
            if case.startswith("2^28"):
                out.append((f"{label} >= 0.95x copy", r["x_copy"] >= 0.95, f"{r['x_copy']:.3f}x"))
            if s is not None and case.startswith("2^24"):
                out.append((f"{label} >= 1.1x eager", s >= 1.1, f"{s:.2f}x"))
            if s is not None:
                out.append((f"{label} no slower than eager", s >= 1.0, f"{s:.2f}x"))
        elif kernel == "rmsnorm":
            s = _speedup(r, "F.rms_norm")
            if s is not None:
                need = 1.1 if case == "16384x8192" else 1.0
                out.append((f"{label} >= {need}x F.rms_norm", s >= need, f"{s:.2f}x"))
            if case == "65536x4096":
                out.append((f"{label} >= 0.90x copy", r["x_copy"] >= 0.90, f"{r['x_copy']:.3f}x"))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    kernels, e2e = [], []
    for path in sorted(args.results.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except ValueError as e:
            print(f"skipping {path.name}: {e}", file=sys.stderr)
            continue
        if isinstance(data, dict) and "rows" in data and "kernel" in data:
            kernels.append(data)
        elif isinstance(data, dict) and "variants" in data:
            e2e.append(data)
    if not kernels and not e2e:
        print(f"no benchmark results in {args.results}", file=sys.stderr)
        return 1
    lines = ["## Benchmarks", ""]
    checks = []
    for res in kernels:
        lines += kernel_section(res)
        if res.get("device") == "cuda":  # the targets are for the GPU
            checks += targets(res)
    for res in e2e:
        lines += e2e_section(res)
        if res.get("device") == "cuda" and not res.get("smoke"):
            checks += targets(res)
    if checks:
        met = sum(ok for _, ok, _ in checks)
        lines += [f"## Targets (H200): {met} of {len(checks)} met", ""]
        lines += [f"- {'PASS' if ok else 'MISS'} {name}: {got}" for name, ok, got in checks]
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
