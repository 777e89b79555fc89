"""The PNG of a benchmark's result: per group, GB/s back to back per impl and case (the copy
bandwidth as a line), and the per-call time at decode sizes."""

from __future__ import annotations

import sys
from pathlib import Path

from .report import OURS


def _bars(ax, rows: list[dict], impls: list[str], colors: dict, value, label_of) -> float:
    """Grouped bars of value(row) per case and impl; returns the tallest bar."""
    cases = list(dict.fromkeys(r["case"] for r in rows))
    bar = 0.8 / len(impls)
    top = 1e-9
    for j, name in enumerate(impls):
        xs, ys = [], []
        for i, case in enumerate(cases):
            for r in rows:
                if r["case"] == case and r["impl"] == name and value(r):
                    xs.append(i + (j - (len(impls) - 1) / 2) * bar)
                    ys.append(value(r))
        if xs:
            ax.bar(xs, ys, bar, label=name, color=colors[name],
                   edgecolor="black" if name == OURS else None)
            top = max(top, *ys)
    for i, case in enumerate(cases):
        for r in rows:
            if r["case"] == case and r["impl"] == OURS and value(r) and label_of(r):
                j = impls.index(OURS)
                ax.text(i + (j - (len(impls) - 1) / 2) * bar, value(r) + 0.01 * top,
                        label_of(r), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels(cases, rotation=20 if len(cases) > 4 else 0, fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return top


def plot(result: dict, out_dir: Path) -> Path | None:
    """PNG: per group, GB/s back to back per impl and case (copy as a line), and the per-call
    time at decode sizes."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # plotting is optional
        print(f"no plot: matplotlib unavailable ({e})", file=sys.stderr)
        return None
    rows = result["rows"]
    if not rows:
        return None
    panels = list(dict.fromkeys((r["group"], r.get("kind", "bandwidth")) for r in rows))
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    colors = {name: f"C{i}" for i, name in enumerate(impls)}
    ncases = max(len({r["case"] for r in rows if (r["group"], r.get("kind", "bandwidth")) == p})
                 for p in panels)
    width = max(7.0, 0.35 * ncases * (len(impls) + 1) + 2)
    fig, axes = plt.subplots(len(panels), 1, figsize=(width, 3.4 * len(panels)), squeeze=False)
    copy_gbps = result.get("copy", {}).get("gbps")
    for ax, (group, kind) in zip(axes[:, 0], panels):
        prow = [r for r in rows if (r["group"], r.get("kind", "bandwidth")) == (group, kind)]
        pimpls = [i for i in impls if any(r["impl"] == i for r in prow)]
        where = f"{result['kernel']}{' ' + group if group else ''} on {result['device_name']}"
        if kind == "latency":
            top = _bars(ax, prow, pimpls, colors, lambda r: r["median_ms"] and r["median_ms"] * 1e3,
                        lambda r: f"{r['median_ms'] * 1e3:.1f}")
            ax.set_ylabel("us per call")
            ax.set_title(f"{where}: per call at decode sizes, back to back (lower is better)",
                         fontsize=10)
        else:
            top = _bars(ax, prow, pimpls, colors, lambda r: r["gbps"],
                        lambda r: r["x_copy"] and f"{r['x_copy']:.2f}x")
            if copy_gbps:
                ax.axhline(copy_gbps, color="black", linestyle="--", linewidth=1,
                           label=f"copy {copy_gbps:.0f} GB/s")
                top = max(top, copy_gbps)
            ax.set_ylabel("GB/s")
            ax.set_title(f"{where}: back to back", fontsize=10)
        ax.set_ylim(0, top * 1.25)
        ax.legend(fontsize=7, ncol=min(len(pimpls) + 1, 6), loc="upper left")
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{result['kernel']}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
