"""Stage 5: compile the generated CMake project with Ninja."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..core.backend import Backend
from ..core.errors import BuildError
from ..core.runner import capture, run_logged
from . import configure_seed, inputs, pch
from .plan import VariantPlan
from .toolchain import find_cxx


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


def compiler_launcher() -> str | None:
    """ccache, else sccache, when available (KBUILD_COMPILER_CACHE=path|name picks one, none
    disables it). ccache first: its direct mode makes a warm rebuild skip the preprocessor and
    it shares entries between checkouts in different folders; build-all passes sccache, whose
    per-capability device steps are shared between torch versions."""
    choice = os.environ.get("KBUILD_COMPILER_CACHE", "auto")
    if choice == "none":
        return None
    candidates = [choice] if choice != "auto" else ["ccache", "sccache"]
    return next(filter(None, map(cache_tool, candidates)), None)


NVCC_THREADS_VAR = "KBUILD_NVCC_THREADS"
GIB_PER_NVCC = 1.5  # memory one nvcc thread of a template-heavy kernel may take (GiB)


@dataclass(frozen=True)
class Split:
    """How a build uses the machine: Ninja jobs, of which at most `nvcc_jobs` are nvcc runs
    (a Ninja pool) of `nvcc_threads` each (one per capability at most); C++ units such as the
    binding take the other jobs while nvcc runs."""
    jobs: int
    nvcc_threads: int
    cores: int
    memory_gib: float
    cuda_files: int
    nvcc_jobs: int = 1

    def __str__(self) -> str:
        nvcc = (f", nvcc {self.nvcc_jobs} at a time × {self.nvcc_threads} threads"
                if self.cuda_files else "")
        return (f"{self.jobs} jobs{nvcc} ({self.cores} cores, {self.memory_gib:.0f} GiB "
                f"available)")


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


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise BuildError(f"{name}={value!r} is not a positive number", hint=f"unset {name} or set "
                         "it to a number of threads, e.g. 4")
    return int(value)


def split(plan: VariantPlan, jobs: int | None = None, *, cores: int | None = None,
          memory_gib: float | None = None) -> Split:
    """Ninja jobs and nvcc threads for `plan`: with fewer CUDA files than cores, each nvcc
    compiles its capabilities in parallel (`--threads`), so a ten-capability kernel uses ten
    cores; nvcc runs × threads stays within the cores and the memory, and the other jobs (up
    to one per core) compile C++ beside them. `jobs` (--jobs) and $KBUILD_NVCC_THREADS
    override."""
    cores = cores or _cores()
    memory = _memory_gib() if memory_gib is None else memory_gib
    units = [(len([s for s in k.src if s.endswith(".cu")]), len(plan.kernel_archs.get(n, [])))
             for n, k in plan.kernels.items() if k.backend == Backend.CUDA]
    cuda_files = sum(n for n, _ in units)
    archs = max((a for n, a in units if n), default=1)
    threads = _env_int(NVCC_THREADS_VAR)
    if threads is None:
        threads = max(1, min(archs, cores // max(1, min(cuda_files, cores)))) if cuda_files else 1
    nvcc_jobs = max(1, -(-cores // threads))
    if cuda_files:
        nvcc_jobs = max(1, min(nvcc_jobs, cuda_files, int(memory / (GIB_PER_NVCC * threads))))
    if jobs is None:
        jobs = max(nvcc_jobs, min(cores, int(memory / GIB_PER_NVCC) or 1))
    return Split(jobs, threads, cores, memory, cuda_files, min(nvcc_jobs, jobs))


def configure_args(plan: VariantPlan, src: Path, build: Path,
                   jobs: int | None = None, precompiled_header: bool = False) -> list[str]:
    args = [_tool("cmake"), "-S", str(src), "-B", str(build), "-G", "Ninja",
            f"-DCMAKE_MAKE_PROGRAM={_tool('ninja')}", "-DCMAKE_BUILD_TYPE=Release",
            f"-DCMAKE_CXX_COMPILER={find_cxx()}",
            # Skip CMake's probe compiles (ABI/feature detection): the plan supplies all flags.
            "-DCMAKE_CXX_COMPILER_FORCED=ON",
            f"-DKB_PCH={'ON' if precompiled_header else 'OFF'}"]
    launcher = compiler_launcher()
    if launcher:
        args.append(f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}")
    if plan.cuda:
        # CMake wants a default; each kernel target sets its own list of archs.
        probe_arch = next(iter(plan.kernel_archs.values()), ["7.5"])[0]
        how = split(plan, jobs)
        args += [f"-DKB_NVCC_THREADS={how.nvcc_threads}", f"-DKB_NVCC_JOBS={how.nvcc_jobs}",
                 f"-DCMAKE_CUDA_COMPILER={plan.cuda.nvcc}",
                 f"-DCMAKE_CUDA_HOST_COMPILER={find_cxx()}", "-DCMAKE_CUDA_COMPILER_FORCED=ON",
                 "-DCMAKE_CUDA_ARCHITECTURES=" + probe_arch.split("+")[0].replace(".", "") + "-real"]
        if launcher:
            args.append(f"-DCMAKE_CUDA_COMPILER_LAUNCHER={launcher}")
    return args


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


def cache_counts(launcher: str | None) -> CacheCounts | None:
    """The cache's hit and miss counters now (sccache or ccache), or None."""
    if not launcher:
        return None
    name = Path(launcher).name
    try:
        if "sccache" in name:
            proc = capture([launcher, "--show-stats", "--stats-format", "json"], timeout=60)
            stats = json.loads(proc.stdout)["stats"]
            return CacheCounts("sccache", sum(stats["cache_hits"]["counts"].values()),
                               sum(stats["cache_misses"]["counts"].values()))
        if "ccache" in name:
            proc = capture([launcher, "--print-stats"], timeout=60)
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


def ninja_steps(build: Path, since: int) -> list[tuple[str, float]]:
    """The steps Ninja logged after byte `since` of .ninja_log, as (output, seconds)."""
    log = build / ".ninja_log"
    if not log.is_file():
        return []
    with log.open("rb") as f:
        f.seek(since)
        lines = f.read().decode("utf-8", "replace").splitlines()
    steps = {}
    for line in lines:
        parts = line.split("\t")
        if len(parts) >= 4 and parts[0].isdigit() and parts[1].isdigit():
            steps[parts[3]] = (int(parts[1]) - int(parts[0])) / 1000
    return sorted(steps.items(), key=lambda kv: -kv[1])


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
    the header (stages/pch.py)."""
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
    """CMake configure into `build`, from a seed when one fits (stages/configure_seed.py), else
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
                    progress: Progress | None = None) -> Compiled:
    """Configures (once) and builds; returns the built `.so` and this run's slowest steps."""
    def phase(name: str):
        if progress is None:
            return None
        progress(name, "")
        return lambda line: progress(name, line)

    build = src / "cmake-build"
    log = src / "build.log"
    log.write_text("")
    launcher = compiler_launcher()
    pch_off = pch.off_reason(plan, find_cxx(), launcher)
    env = cache_env(launcher, plan.project, pch_off is None)
    args = configure_args(plan, src, build, jobs, pch_off is None)
    stamp = build / "kbuild-configure.args"
    if build.is_dir() and (not stamp.is_file() or stamp.read_text() != "\n".join(args)):
        shutil.rmtree(build)  # another compiler, toolkit or launcher: configure afresh
    if not (build / "build.ninja").is_file():
        configure(args, src, build, log, env, phase("configure"))
        stamp.write_text("\n".join(args))
    cmd = [_tool("cmake"), "--build", str(build), "--parallel", str(split(plan, jobs).jobs)]
    ninja_log = build / ".ninja_log"
    since = ninja_log.stat().st_size if ninja_log.is_file() else 0
    before = cache_counts(launcher)
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
    after = cache_counts(launcher) if before else None
    cache = (CacheCounts(after.tool, after.hits - before.hits, after.misses - before.misses)
             if before and after else None)
    return Compiled(so, steps[:SLOWEST], cache, header)
