"""`kbuild bench`: options → `bench.run`, then its tables (the benchmarks' own run is bench.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import bench as bench_mod
from .app import app, out, table as make_table, warn
from .options import ProjectArg


def summary_table(results: list[dict]):
    table = make_table("kernel", "case", "ours us/call", "GB/s", "x copy", "flushed x copy",
                  "ours vs baselines", "ok",
                  title="ours, per case: calls back to back, wall clock per call (x copy = "
                        "achieved / device-to-device copy bandwidth; flushed = one call after "
                        "an L2 flush)", title_justify="left")
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    for res in results:
        for r in res.get("rows", []):
            if r.get("impl") != "ours":
                continue
            case = f"{r['group']} {r['case']}" if r.get("group") else r["case"]
            if r.get("kind") == "latency":
                case += " (decode)"
            vs = ", ".join(f"{k} {v:.2f}x" for k, v in (r.get("speedup") or {}).items())
            per_call = r["median_ms"] * 1e3 if r.get("median_ms") else None
            table.add_row(res["kernel"], case, fmt(per_call, ".2f"), fmt(r.get("gbps"), ".1f"),
                          fmt(r.get("x_copy"), ".3f"), fmt(r.get("flushed_x_copy"), ".3f"),
                          vs or "-", "yes" if r.get("ok") else "[red]NO[/]")
    return table


@app.command()
def bench(
    project: ProjectArg = Path("."),
    variant_dir: Annotated[Optional[Path], typer.Option(
        help="A built variant (or a folder of variants) to benchmark; default: build the "
             "project's variant for --device (no-op when up to date).")] = None,
    out_dir: Annotated[Optional[Path], typer.Option(
        "--out", help="Where the JSON and PNG results go; default: PROJECT/.kbuild/bench.")] = None,
    device: Annotated[Optional[str], typer.Option(
        help="cuda or cpu; default: cuda when torch sees a GPU.")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Few small cases (a smoke run).")] = False,
    only: Annotated[Optional[list[str]], typer.Option(
        help="Only these benchmark scripts (names or globs, e.g. rmsnorm).")] = None,
    no_compile: Annotated[bool, typer.Option(
        "--no-compile", help="Skip the torch.compile baselines.")] = False,
    reps: Annotated[Optional[int], typer.Option(help="Timed calls per implementation.")] = None,
) -> None:
    """Run the project's benchmarks/benchmark*.py against a built variant; JSON, PNG, tables."""
    root = project.resolve()

    def starting(script: Path, device: str, variant: Path) -> None:
        out.print(f"[bold]== {script.relative_to(root)}[/] ({device}, {variant.name})",
                  highlight=False)

    done = bench_mod.run(project, variant_dir=variant_dir, out_dir=out_dir, device=device,
                         quick=quick, only=only, no_compile=no_compile, reps=reps,
                         on_script=starting, log=lambda m: out.print(m, highlight=False), warn=warn)
    status = make_table("benchmark", "status", "time", "results",
                        title=f"kbuild bench {done.project.name}", title_justify="left")
    for r in done.runs:
        status.add_row(r.script.name, "[green]ok[/]" if r.code == 0 else f"[red]FAILED ({r.code})[/]",
                       f"{r.seconds:.1f}s", ", ".join(p.name for p in r.made) or "-")
    out.print(status)
    for res in done.results:
        copy = res.get("copy", {}).get("gbps")
        out.print(f"{res['kernel']}: {res.get('device_name')}, copy bandwidth "
                  f"{copy:.1f} GB/s" if copy else f"{res['kernel']}: no copy figure",
                  highlight=False)
    if done.results:
        out.print(summary_table(done.results))
    out.print(f"results in {done.results_dir}", highlight=False)
    if done.failed:
        raise typer.Exit(1)
