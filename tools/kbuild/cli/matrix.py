"""CLI commands over the environment matrix: `build-all`, `envs`, `lock` and `matrix update`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ..core.errors import BuildError
from ..core.layout import Layout
from .app import app, command_group, err, keep_whole, out, table as make_table, warn
from .options import (BuildDirOpt, CoresOpt, DistOpt, EnvsDirOpt, MatrixOpt, MatrixProjectArg as ProjectArg,
                      MaxJobsOpt, PrintLogsOpt, TorchIndexOpt, VariantOpt)




def _size(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


def _secs(s: float) -> str:
    return "-" if not s else (f"{s:.1f}s" if s < 120 else f"{s / 60:.1f}min")


def _say(msg: str) -> None:  # a remark on stderr (which matrix is used)
    err.print(msg, highlight=False, soft_wrap=True)


def _load(project: Path, matrix: Path | None):
    from ..matrix import matrix as matrix_mod
    return matrix_mod.load_or_default(project, matrix, _say)


@app.command("build-all")
def build_all(
    project: ProjectArg = Path("."),
    only: Annotated[Optional[list[str]], typer.Option(
        help="Environments or variants to build (names or globs, repeatable or comma-separated).")] = None,
    skip: Annotated[Optional[list[str]], typer.Option(help="Environments to leave out (globs).")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", help="Environments built in parallel.")] = 1,
    compile_jobs: Annotated[Optional[int], typer.Option(
        help="Compile jobs per environment; default: CPUs / --jobs.")] = None,
    build_dir: BuildDirOpt = None,
    envs_dir: EnvsDirOpt = None,
    matrix: MatrixOpt = None,
    via: Annotated[str, typer.Option(help="auto (pixi if installed, else PyPI), pixi or pypi.")] = "auto",
    torch_index: TorchIndexOpt = False,
    force: Annotated[bool, typer.Option(help="Rebuild even when nothing changed.")] = False,
    locked: Annotated[bool, typer.Option(
        help="Refuse environments without a lock (PyPI path); stale locks are always refused.")] = False,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the results as JSON.")] = None,
    dist_scheduler: DistOpt = None,
    variant: VariantOpt = None,
    print_build_logs: PrintLogsOpt = False,
    max_jobs: MaxJobsOpt = None,
    cores: CoresOpt = None,
) -> None:
    """Build the variant of every selected environment (in parallel with --jobs).
    kernel-builder's `build-and-copy` of every variant: --max-jobs is --jobs here."""
    from ..matrix import buildall

    opts = buildall.Options(jobs=jobs, build_dir=build_dir, envs_dir=envs_dir, via=via,
                            torch_index=torch_index, force=force, compile_jobs=compile_jobs,
                            cores=cores, print_build_logs=print_build_logs, locked=locked)
    with BuildAllDisplay() as display:
        outcome = buildall.build_all(project, opts, display.on_event, only=only, skip=skip,
                                     variant=variant, matrix=matrix, max_jobs=max_jobs,
                                     dist_scheduler=dist_scheduler, note=_say)
    _table(outcome)
    if json_out:
        outcome.write_json(json_out)
    for r in outcome.failed:
        if r.log:
            err.print(f"[red]{r.env}[/]: {r.status}: {r.message}", highlight=False, soft_wrap=True)
            err.print(f"  log: {r.log}", highlight=False, soft_wrap=True)
    if outcome.interrupted:
        err.print("interrupted", highlight=False)
        raise typer.Exit(130)
    if outcome.failed:
        raise typer.Exit(1)


class BuildAllDisplay:
    """build-all's progress on stderr: one line per environment (a live display on a terminal,
    else a line per change of stage); -L: the builds' own lines above it."""

    def __init__(self) -> None:
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.fields[env]:<16}"), BarColumn(),
                                 TextColumn("{task.fields[stage]}"), TimeElapsedColumn(),
                                 console=err, disable=not err.is_terminal)
        self.tasks: dict[str, int] = {}
        self.last: dict[str, str] = {}

    def __enter__(self) -> "BuildAllDisplay":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def on_event(self, env: str, stage: str, fields: dict) -> None:
        progress, tasks, last = self.progress, self.tasks, self.last
        if stage == "waiting":  # announced before the run, in the environments' order
            tasks[env] = progress.add_task("", env=env, stage="waiting", total=None)
            return
        if stage == "output":  # -L: the build's own lines (`<variant>> …` for its compile)
            progress.console.print(fields["line"], highlight=False, markup=False, soft_wrap=True)
            return
        if stage == "done":
            r = fields["result"]
            progress.update(tasks[env], stage=r.status, completed=1, total=1)
            progress.stop_task(tasks[env])
            if not err.is_terminal:
                err.print(f"{env}: {r.status}", highlight=False)
            return
        text = fields.get("note") or stage
        kw = {}
        if "total" in fields:
            kw = {"completed": fields["completed"], "total": fields["total"]}
            text = f"compiling {fields['completed']}/{fields['total']}"
        progress.update(tasks[env], stage=text, **kw)
        if not err.is_terminal and last.get(env) != stage + (fields.get("note") or ""):
            last[env] = stage + (fields.get("note") or "")
            err.print(f"{env}: {text}", highlight=False)


def _table(outcome) -> None:
    table = make_table("environment", "variant", "status", "env", "build", "total", ".so", "notes",
                       title=f"build-all ({outcome.via}) -> {outcome.build_dir}")
    colors = {"built": "green", "up to date": "green", "failed": "red", "interrupted": "red",
              "unavailable": "yellow", "covered": "green", "skipped": "yellow"}
    for r in outcome.results:
        note = r.message
        if r.status == "failed" and r.log:
            note = f"{r.message}\nlog: {r.log}" if r.message else f"log: {r.log}"
        env_time = _secs(r.env_seconds) + (" (new)" if r.env_created else "")
        table.add_row(r.env, r.variant, f"[{colors.get(r.status, 'white')}]{r.status}[/]",
                      env_time, _secs(r.build_seconds), _secs(r.seconds), _size(r.so_bytes),
                      note)
    for column in (0, 1):  # environment and variant names stay whole
        keep_whole(table, column, out)
    out.print(table)


@app.command("envs")
def envs(
    project: ProjectArg = Path("."),
    list_: Annotated[bool, typer.Option("--list", help="List the environments (the default).")] = True,
    only: Annotated[Optional[list[str]], typer.Option(
        help="Only these environments (names or globs, repeatable or comma-separated).")] = None,
    create: Annotated[Optional[list[str]], typer.Option(
        help="Realise these environments from PyPI now (names or globs).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    envs_dir: EnvsDirOpt = None,
    matrix: MatrixOpt = None,
    torch_index: TorchIndexOpt = False,
    probe: Annotated[bool, typer.Option(help="Ask pip/uv whether each torch wheel is reachable.")] = True,
    ci: Annotated[Optional[str], typer.Option(
        "--ci", help="The CI build jobs instead, one JSON line (GitHub's matrix `include`): "
        "`pr` one environment per backend, `release` every variant and platform.")] = None,
) -> None:
    """Every environment of the matrix: its variant, and whether it can be realised here from PyPI."""
    from ..matrix import envs as envs_mod

    project = project.resolve()
    mx = _load(project, matrix)
    folder = envs_mod.envs_dir(project, envs_dir)
    specs = mx.select(only) if only else list(mx.envs)
    if ci is not None:
        from ..matrix.ci import as_json, ci_jobs
        typer.echo(json.dumps(as_json(ci_jobs(project, specs, ci)), separators=(",", ":")))
        return
    if create:
        for spec in mx.select(create):
            r = envs_mod.realise(spec, folder, log=lambda m: err.print(f"{spec.name}: {m}"),
                                 log_dir=Layout.of(project).logs, torch_index=torch_index)
            out.print(f"{spec.name}: {r.python}" + (f" (CUDA_HOME={r.cuda_home})" if r.cuda_home else ""))
        return
    if probe:
        specs = envs_mod.annotate(specs, folder, torch_index=torch_index)
    if json_out:
        typer.echo(json.dumps([envs_mod.describe(s, folder) for s in specs], indent=1))
        return
    table = make_table("environment", "variant", "platforms", "torch wheel", "toolkit", "lock", "here",
                  title=f"{mx.path} ({len(specs)} environments; realisable here from PyPI?)")
    reasons = []
    for s in specs:
        a = s.available
        cached = envs_mod.read_stamp(folder / s.name) is not None
        lock = _lock_note(s)
        if a is None:
            here, torch_note, tk_note = "-", s.torch_version, s.cuda or "-"
        else:
            here = ("[green]yes[/]" + (" (cached)" if cached else "")) if a.ok else "[yellow]no[/]"
            torch_note, tk_note = a.torch_note, a.toolkit_note
            if not a.ok:
                reasons.append((s.name, a.reason))
        table.add_row(s.name, s.variant(), ",".join(p.removeprefix("linux-") for p in s.platforms),
                      torch_note, tk_note, lock, here)
    for column in (0, 1):  # environment and variant names stay whole
        keep_whole(table, column, out)
    out.print(table)
    if reasons:
        out.print("Why not:", highlight=False)
        for name, reason in reasons:
            out.print(f"  {name}: {reason}", highlight=False, soft_wrap=True)


def _lock_note(spec) -> str:
    """The environment's lock (and its toolkit's) on this platform: current, stale or none."""
    from ..matrix.lock import states as lock_states
    states = {st.target.name == spec.name: st.state for st in lock_states(spec)}
    env, toolkit = states.get(True, "missing"), states.get(False)
    if "stale" in (env, toolkit):
        return "[red]stale[/]" + ("" if env == "stale" else " (toolkit)")
    return "-" if env == "missing" else "yes" if toolkit in (None, "current") else "yes (toolkit: none)"


@app.command("lock")
def lock(
    envs: Annotated[Optional[list[str]], typer.Argument(
        help="Environments to lock (names or globs); default: every one realisable here from PyPI.",
        show_default=False)] = None,
    project: Annotated[Path, typer.Option("--project", "-p", help="Kernel project directory.")] = Path("."),
    matrix: MatrixOpt = None,
    check: Annotated[bool, typer.Option(
        "--check", help="Only verify: exit 1 when a lock is stale, malformed, belongs to no "
                        "environment, or differs from what its inputs resolve to.")] = False,
    upgrade: Annotated[bool, typer.Option(help="Re-resolve locks that are still current.")] = False,
    platform: Annotated[Optional[str], typer.Option(
        help="Platform to lock for (linux-64, linux-aarch64); default: this machine's.")] = None,
    envs_dir: EnvsDirOpt = None,
    torch_index: TorchIndexOpt = False,
) -> None:
    """Lock environments of pixi.toml into PEP 751 files (locks/<platform>/pylock.<env>.toml)."""
    from ..matrix import envs as envs_mod
    from ..matrix import lock as lock_mod
    from ..matrix.lockall import lock_envs

    project = project.resolve()
    mx = _load(project, matrix)
    platform = platform or lock_mod.host_platform()
    if check:  # each current lock is re-derived from its inputs and compared with what it holds
        problems, unlocked = lock_mod.check(mx, platform, inst=envs_mod.installer())
        if unlocked:
            out.print(f"not locked (resolved afresh when built): {', '.join(unlocked)}",
                      highlight=False, soft_wrap=True)
        for problem in problems:
            err.print(f"[red]stale:[/] {problem}", highlight=False, soft_wrap=True)
        out.print(f"{len(problems)} stale lock(s) under {mx.locks / platform}", highlight=False)
        raise typer.Exit(1 if problems else 0)
    if mx.default and matrix is None:
        raise BuildError(f"{project} has no pixi.toml; the default matrix's locks ship with the "
                         "builder", hint=f"to lock your own, copy {mx.path} to the project as pixi.toml")
    specs = mx.select(envs) if envs else list(mx.envs)
    rows = lock_envs(mx, specs, platform, envs_dir=envs_mod.envs_dir(project, envs_dir),
                     upgrade=upgrade, torch_index=torch_index)
    table = make_table("environment", "lock", "status", title=f"locks for {platform} ({mx.locks / platform})")
    shown = {"failed": "[red]failed[/]", "skipped": "[yellow]skipped[/]"}
    for r in rows:
        status = shown.get(r.status, r.status) + (f": {r.reason}" if r.reason else "")
        path = str(r.path.relative_to(mx.path.parent)) if r.path else "-"
        table.add_row(r.env if r.target == r.env else f"  {r.target}", path, status)
    for column in (0, 1):  # environment and variant names stay whole
        keep_whole(table, column, out)
    out.print(table)
    for problem in lock_mod.check(mx, platform)[0]:
        warn(problem)
    # A skipped environment fails the command only when it was asked for by name.
    if any(r.failed or (r.status == "skipped" and envs) for r in rows):
        raise typer.Exit(1)


matrix_app = command_group("matrix", "Maintain the environment matrix (pixi.toml).")


@matrix_app.command("update")
def matrix_update(
    project: ProjectArg = Path("."),
    matrix: MatrixOpt = None,
    index: Annotated[Optional[str], typer.Option(
        help="Simple-API index to read torch releases from; default: [tool.kbuild.update] index "
             "in pixi.toml, else pip's configured index (PyPI).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the diff; change nothing.")] = False,
) -> None:
    """Add torch releases newer than the matrix (and newer patch releases' pins) to pixi.toml."""
    from ..matrix import update as update_mod

    project = project.resolve()
    mx = _load(project, matrix)
    if mx.default and matrix is None:
        raise BuildError(f"{project} has no pixi.toml to update",
                         hint=f"copy {mx.path} to the project as pixi.toml, or pass --matrix")
    index = index or update_mod.default_index(mx)
    changes, unknown = update_mod.find_updates(mx, index)
    for version in unknown:
        warn(f"torch {version} on {index}: its wheels carry no flavour label and its CUDA version "
             "could not be read; not added")
    old = mx.path.read_text(encoding="utf-8")
    if changes.text == old:
        out.print(f"{mx.path.name}: no torch release on {index} is newer than the matrix"
                  + (" (but see the warnings)" if unknown else ""), highlight=False)
        raise typer.Exit(1 if unknown else 0)
    if dry_run:
        typer.echo(changes.diff(old, mx.path.name), nl=False)
    else:
        mx.path.write_text(changes.text, encoding="utf-8")
    for name in changes.added:
        out.print(f"added {name}", highlight=False)
    for bump in changes.bumped:
        out.print(f"pinned {bump}", highlight=False)
    if not dry_run:
        out.print("next: `kbuild lock` (PyPI path) and `pixi lock` (pixi)", highlight=False)
