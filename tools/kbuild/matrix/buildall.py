"""`build-all`: every selected environment's variant, in parallel, each in its own process.

First the environments are planned into variants (`jobs.plan_jobs`): each build/ folder is
written by one environment. Per building environment: realise it (pixi, or
a cached PyPI venv from envs.py, from its lock), skip it when its inputs (sources, manifest,
builder, environment pins) match the last successful build and the variant in build/ is intact,
else run `kbuild build` for its interpreter in a new process group, logging to
.kbuild/logs/<env>.log. `pipeline.build_plan` moves each variant into build/ atomically, so an
interrupted or failed environment leaves its previous variant (or none), never a partial one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from ..core import manifest as manifest_mod
from ..core.built import digest_files
from ..core.errors import BuildError
from ..core.files import write_atomic
from ..core.gitinfo import build_uid, content_hash
from ..core.layout import METADATA, Layout
from ..core.runner import Process, spawn_logged, stop
from ..stages.compile import NVCC_SPLIT_VAR, check_cores, check_jobs, dist
from ..stages.plan import input_files
from . import realise
from .choose import in_matrix
from .jobs import EnvResult, Job, env_variant, plan_jobs
from .matrix import EnvSpec, Matrix, load_or_default

__all__ = ["EnvResult", "Event", "Interrupted", "Job", "Options", "Outcome", "Runner", "build_all",
           "env_variant", "plan_jobs", "summary_json"]

NINJA_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")


@dataclass
class Options:
    jobs: int = 1
    build_dir: Path | None = None
    envs_dir: Path | None = None
    via: str = "auto"           # auto | pypi | pixi
    torch_index: bool = False
    force: bool = False
    compile_jobs: int | None = None
    cores: int | None = None    # --cores: what each environment's build may use
    print_build_logs: bool = False  # -L: every build's full output, as it comes
    strict: list[str] = field(default_factory=list)  # names asked for explicitly
    locked: bool = False        # PyPI path: every environment from its lock
    # --dist-scheduler: each build's compiles go there. A build receives it as the variable
    # KBUILD_DIST_SCHEDULER, never on its command line (a URL may hold a password, and every
    # user of the machine can read a process's arguments).
    dist_scheduler: str | None = None


Event = Callable[[str, str, dict], None]  # (env, stage, fields); stage "output": {"line"} (-L)


def builder_hash() -> str:
    """Hash of the builder's own code and templates: a builder change rebuilds everything."""
    root = Path(__file__).resolve().parents[1]  # the kbuild package
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    return content_hash(files, root)


def fingerprint(project: Path, job: Job, env_key: str, builder: str) -> str:
    manifest = manifest_mod.load(project, warn=lambda _: None)
    files = input_files(project, manifest)
    uid, _ = build_uid(project, files)
    text = json.dumps({"inputs": content_hash(files, project), "uid": uid, "env": env_key,
                       "builder": builder, "backend": job.spec.backend, "variant": job.variant,
                       # split or not: a variant built the other way is built again
                       "split": os.environ.get(NVCC_SPLIT_VAR, "").strip().lower()})
    return hashlib.sha256(text.encode()).hexdigest()


def state_file(project: Path, build_dir: Path, variant: str) -> Path:
    tag = hashlib.sha256(str(build_dir).encode()).hexdigest()[:8]
    return Layout.of(project).buildall_state / f"{variant}.{tag}.json"


def is_current(project: Path, build_dir: Path, variant: str, fp: str) -> bool:
    try:
        state = json.loads(state_file(project, build_dir, variant).read_text())
    except (OSError, ValueError):
        return False
    target = build_dir / variant
    return (state.get("fingerprint") == fp and (target / METADATA).is_file()
            and state.get("digest") == digest_files(target))


def record(project: Path, build_dir: Path, variant: str, fp: str) -> None:
    path = state_file(project, build_dir, variant)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({"fingerprint": fp, "digest": digest_files(build_dir / variant)}))


def so_size(variant_dir: Path) -> int | None:
    sos = list(variant_dir.glob("*.so"))
    return sum(p.stat().st_size for p in sos) if sos else None


class Runner:
    """Runs environments on a thread pool; child processes live in their own process groups."""

    def __init__(self, project: Path, matrix: Matrix, opts: Options, on_event: Event) -> None:
        self.project = project.resolve()
        self.matrix = matrix
        self.opts = opts
        self.layout = Layout.of(self.project, opts.build_dir)
        self.build_dir = self.layout.build_dir
        self.envs_dir = opts.envs_dir.resolve() if opts.envs_dir else self.layout.envs
        self.log_dir = self.layout.logs
        self.realiser = realise.realiser(opts.via, matrix, envs_dir=self.envs_dir,
                                         log_dir=self.log_dir, torch_index=opts.torch_index,
                                         locked=opts.locked)
        self.via = self.realiser.via
        self.event = on_event
        self.stop = threading.Event()
        self.children: dict[str, Process] = {}
        self.lock = threading.Lock()
        self.builder = builder_hash()

    # -- one environment -------------------------------------------------------------------------
    def run_one(self, job: Job) -> EnvResult:
        spec = job.spec
        start = time.monotonic()
        result = EnvResult(spec.name, job.variant, "failed")
        log = self.log_dir / f"{spec.name}.log"
        try:
            if self.stop.is_set():
                return interrupted(result, "before it started")
            self.event(spec.name, "environment", {})
            try:
                real = self.realiser.realise(
                    spec, lambda msg: self.event(spec.name, "environment", {"note": msg}), self._call)
            except realise.Unavailable as e:
                result.status = "failed" if spec.name in self.opts.strict else "unavailable"
                result.message = e.message
                return result
            result.env_seconds, result.env_created = real.seconds, real.created
            if self.stop.is_set():
                return interrupted(result, "once its environment was ready, before it compiled")
            fp = fingerprint(self.project, job, real.key, self.builder)
            if not self.opts.force and is_current(self.project, self.build_dir, job.variant, fp):
                result.status = "up to date"
                result.so_bytes = so_size(self.build_dir / job.variant)
                return result
            self.event(spec.name, "compiling", {})
            t0 = time.monotonic()
            code = self._build(real, log)
            result.build_seconds = time.monotonic() - t0
            if code != 0:
                result.log = str(log)
                if self.stop.is_set():
                    return interrupted(result, "while it compiled")
                result.message = _tail_error(log)
                return result
            variant_dir = self.build_dir / job.variant
            if not (variant_dir / METADATA).is_file():
                result.message = f"the build produced no {variant_dir.name}"
                result.log = str(log)
                return result
            record(self.project, self.build_dir, job.variant, fp)
            result.status = "built"
            result.so_bytes = so_size(variant_dir)
            return result
        except BuildError as e:
            if self.stop.is_set():
                interrupted(result, "while its environment was being made")
            else:
                result.message = e.message
            result.log = str(log) if log.is_file() else None
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a") as f:
                f.write(f"\nerror: {e}\n")
            result.log = str(log)
            return result
        finally:
            result.seconds = time.monotonic() - start
            self.event(spec.name, "done", {"result": result})

    def _build(self, real: realise.RealisedEnv, log: Path) -> int:
        args = ["build", str(self.project), "--build-dir", str(self.build_dir),
                "--backend", real.spec.backend]
        if self.opts.cores is not None:  # the environment's budget, divided by its build
            args += ["--cores", str(self.opts.cores)]
        if self.opts.compile_jobs or self.opts.cores is None:
            args += ["--jobs", str(self.opts.compile_jobs
                                   or max(1, (os.cpu_count() or 1) // max(1, self.opts.jobs)))]
        if self.opts.print_build_logs:
            args.append("--print-build-logs")
        cmd, extra = self.realiser.build_command(real, args)
        if "KBUILD_COMPILER_CACHE" in os.environ:
            extra.pop("KBUILD_COMPILER_CACHE", None)
        if self.opts.dist_scheduler is not None:
            extra[dist.SCHEDULER_VAR] = self.opts.dist_scheduler
        return self._call(real.spec.name, cmd, log, env={**os.environ, **extra}, progress=True)

    def _call(self, name: str, cmd: list[str], log: Path, env: dict | None = None,
              progress: bool = False) -> int:
        with self.lock:
            if self.stop.is_set():
                return 130
            proc = spawn_logged(cmd, log, env=env)
            self.children[name] = proc
        shown = 0  # -L: how far the log has been shown
        try:
            while proc.poll() is None:
                time.sleep(0.25)
                if progress:
                    self._progress(name, log)
                    shown = self._output(name, log, shown)
            if progress:
                self._output(name, log, shown, final=True)
        finally:
            with self.lock:
                self.children.pop(name, None)
        return proc.returncode

    def _progress(self, name: str, log: Path) -> None:
        try:
            with log.open("rb") as f:
                f.seek(max(0, log.stat().st_size - 4096))
                tail = f.read().decode(errors="replace").splitlines()
        except OSError:
            return
        for line in reversed(tail):
            m = NINJA_PROGRESS.match(line)
            if m:
                self.event(name, "compiling", {"completed": int(m.group(1)), "total": int(m.group(2))})
                return

    def _output(self, name: str, log: Path, shown: int, final: bool = False) -> int:
        """-L: the log's lines after `shown` (bytes) as "output" events; a line still being
        written waits for its end (or for the process's end); returns how far it got."""
        if not self.opts.print_build_logs:
            return shown
        try:
            with log.open("rb") as f:
                f.seek(shown)
                data = f.read()
        except OSError:
            return shown
        complete = data if final else data[:data.rfind(b"\n") + 1]
        for line in complete.decode(errors="replace").splitlines():
            self.event(name, "output", {"line": line})
        return shown + len(complete)

    def interrupt(self) -> None:
        """Stops starting work and ends every child process group (SIGTERM, then SIGKILL)."""
        self.stop.set()
        with self.lock:
            procs = list(self.children.values())
        stop(procs, grace=10)

    # -- all of them ------------------------------------------------------------------------------
    def run(self, specs: list[EnvSpec]) -> list[EnvResult]:
        jobs, settled = plan_jobs(self.project, specs, tuple(self.opts.strict))
        self.realiser.prepare([j.spec for j in jobs])
        results: dict[str, EnvResult] = {}
        for r in settled:  # covered or skipped: nothing to build
            results[r.env] = r
            self.event(r.env, "done", {"result": r})
        pool = ThreadPoolExecutor(max_workers=max(1, self.opts.jobs))
        futures = {pool.submit(self.run_one, j): j for j in jobs}
        try:
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                for fut in done:
                    results[futures[fut].spec.name] = fut.result()
        except KeyboardInterrupt:
            self.interrupt()
            for fut, job in futures.items():
                try:
                    results[job.spec.name] = fut.result()
                except Exception as e:  # a worker that died with the interrupt
                    results[job.spec.name] = interrupted(
                        EnvResult(job.spec.name, job.variant, "failed"),
                        f"({type(e).__name__}{': ' + str(e) if str(e) else ''})")
            raise Interrupted([results[s.name] for s in specs if s.name in results]) from None
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return [results[s.name] for s in specs]


def interrupted(result: EnvResult, when: str) -> EnvResult:
    """`result` as an environment stopped by Ctrl-C or SIGTERM, saying when and what is left."""
    result.status = "interrupted"
    result.message = (f"stopped by the interrupt {when}; build/ keeps the {result.variant} it had "
                      "before, if any")
    return result


class Interrupted(Exception):
    def __init__(self, results: list[EnvResult]) -> None:
        super().__init__("interrupted")
        self.results = results


def _tail_error(log: Path) -> str:
    """The first compiler or CMake diagnostic of a failed build's log, else kbuild's own error."""
    try:
        lines = [ln.strip() for ln in log.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return ""
    for pattern in (r"(: |\)\s*)(fatal )?error\b", r"^CMake Error", r"^error:", r"^FAILED: "):
        for line in lines:
            if re.search(pattern, line):
                return line[:300]
    return (lines[-1] if lines else "")[:300]


def summary_json(results: list[EnvResult]) -> list[dict]:
    return [asdict(r) for r in results]


@dataclass(frozen=True)
class Outcome:
    """What a `build-all` run did: one result per selected environment, in their order."""
    results: list[EnvResult]
    via: str                # pixi | pypi
    build_dir: Path
    jobs: int               # environments built at once
    interrupted: bool = False

    @property
    def failed(self) -> list[EnvResult]:
        return [r for r in self.results if r.status in ("failed", "interrupted")]

    def write_json(self, path: Path) -> None:
        path.write_text(json.dumps({"via": self.via, "jobs": self.jobs,
                                    "results": summary_json(self.results)}, indent=1) + "\n")


def build_all(project: Path, opts: Options, on_event: Event, *, only: list[str] | None = None,
              skip: list[str] | None = None, variant: str | None = None,
              matrix: Path | None = None, max_jobs: int | None = None,
              dist_scheduler: str | None = None,
              note: Callable[[str], None] = lambda _: None) -> Outcome:
    """`kbuild build-all`: the options checked, the environments selected (`only`/`skip`, or the
    one that builds `variant`), each announced through `on_event(env, "waiting", {})`, then
    built. An interrupt (Ctrl-C, SIGTERM) stops the run: the outcome says so."""
    check_jobs(opts.jobs)
    check_jobs(opts.compile_jobs, "--compile-jobs")
    check_jobs(max_jobs, "--max-jobs")
    check_cores(opts.cores)
    if max_jobs is not None:
        if opts.jobs not in (1, max_jobs):
            raise BuildError(f"--max-jobs {max_jobs} and --jobs {opts.jobs} disagree",
                             hint="both are the environments built at once: give one of them")
        opts.jobs = max_jobs
    opts.dist_scheduler = dist.check_scheduler(dist_scheduler)
    if opts.via not in ("auto", "pixi", "pypi"):
        raise BuildError(f"--via must be auto, pixi or pypi, not {opts.via!r}")
    project = project.resolve()
    mx = load_or_default(project, matrix, note)
    specs = mx.select(only, skip)
    if not specs:
        raise BuildError("no environment selected", file=mx.path, hint="check --only/--skip")
    opts.strict = [p for arg in (only or []) for p in arg.split(",") if p and not set(p) & set("*?[")]
    if variant is not None:  # exactly the environment that builds it
        chosen = in_matrix(project, variant, specs).env
        specs, opts.strict = [s for s in specs if s.name == chosen], [chosen]
    runner = Runner(project, mx, opts, on_event)
    specs = runner.realiser.annotate(specs)
    for s in specs:
        on_event(s.name, "waiting", {})
    try:  # Ctrl-C, or SIGTERM (app.main raises it as an interrupt)
        results, interrupted = runner.run(specs), False
    except Interrupted as e:
        results, interrupted = e.results, True
    return Outcome(results, runner.via, runner.build_dir, opts.jobs, interrupted)
