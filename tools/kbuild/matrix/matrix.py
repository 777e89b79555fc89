"""The variant matrix, read from `pixi.toml`: one `EnvSpec` per build environment.

pixi.toml is the single definition: pixi builds its environments from it, and the PyPI path
(`envs.py`) realises the same environments from it where pixi can't run, from the locks in
`locks/<platform>/` next to it (`lock.py`). A project without a pixi.toml gets the default matrix
that ships with the builder (resources/matrix/pixi.toml, the same environments as ours).
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..core.backend import Backend
from ..core.errors import BuildError
from ..core.layout import PIXI_TOML
from ..core.toolconfig import KbuildTool, tool_settings
from ..core.variant import Variant

ENV_NAME_RE = re.compile(r"^torch(\d)(\d+)-(cu\d+|cpu)$")
CPU_ARCH = {"linux-64": "x86_64", "linux-aarch64": "aarch64", "osx-arm64": "aarch64",
            "osx-64": "x86_64", "win-64": "x86_64"}
DEFAULT_MATRIX = Path(str(resources.files("kbuild") / "resources" / "matrix" / PIXI_TOML))
LOCKS_DIR = "locks"  # next to the pixi.toml: locks/<platform>/pylock.<env>.toml
# conda-forge packages a CUDA toolkit feature must provide (torch's CUDA headers need the -dev ones).
TOOLKIT_PACKAGES = ("cuda-version", "cuda-nvcc", "cuda-cudart-dev", "cuda-cccl", "libcublas-dev",
                    "libcusparse-dev", "libcusolver-dev")


@dataclass(frozen=True)
class Availability:
    """Whether the PyPI path can realise an environment on this machine, and why not."""
    ok: bool
    reason: str = ""
    torch_wheel: str | None = None  # what pip/uv resolves the torch requirement to
    torch_compute: str | None = None  # that wheel's flavour ("cu128", "cpu"), None if none
    toolkit: str | None = None      # "pypi" (NVIDIA wheels), a local CUDA_HOME, or None
    torch_note: str = ""            # short forms for tables
    toolkit_note: str = ""


@dataclass(frozen=True)
class EnvSpec:
    name: str                        # "torch27-cu126"
    torch_version: str               # exact pin, "2.7.1"
    torch_index: str | None          # the PyTorch wheel index pixi uses
    cuda: str | None                 # toolkit major.minor ("12.6"), None for CPU
    platforms: tuple[str, ...]       # pixi platforms ("linux-64", ...)
    features: tuple[str, ...] = ()
    solve_group: str | None = None
    python: str | None = None        # conda python spec, "3.11.*"
    pypi_extra: tuple[str, ...] = () # other PyPI requirements of the environment
    toolkit_wheels: tuple[str, ...] = ()  # NVIDIA toolkit wheels for the PyPI path
    no_toolkit_reason: str | None = None  # why there are none
    available: Availability | None = None  # filled by envs.annotate()
    locks: Path | None = None        # the matrix's locks folder (locks/, platforms below it)

    @property
    def release(self) -> Version:
        v = Version(self.torch_version)
        return Version(f"{v.major}.{v.minor}")

    @property
    def torch_tag(self) -> str:
        return f"torch{self.release.major}{self.release.minor}"

    @property
    def compute(self) -> str:
        if self.cuda is None:
            return "cpu"
        v = Version(self.cuda)
        return f"cu{v.major}{v.minor}"

    @property
    def backend(self) -> Backend:
        return Backend.CPU if self.cuda is None else Backend.CUDA

    def variant(self, platform: str = "linux-64") -> str:
        """The build/ folder this environment produces on `platform` (torch ≥ 2.7: cxx11 ABI)."""
        os_name, _, _ = platform.partition("-")
        os_name = {"osx": "darwin", "win": "windows"}.get(os_name, os_name)
        cpu = CPU_ARCH.get(platform, platform.partition("-")[2])
        toolkit = None if self.cuda is None else (Version(self.cuda).major, Version(self.cuda).minor)
        return Variant.torch((self.release.major, self.release.minor), self.backend,
                             backend_version=toolkit, cpu=cpu, os=os_name).name

    @property
    def torch_requirement(self) -> str:
        """What the PyPI path asks pip/uv for: PyPI's own (unlabelled) CUDA wheel, or `+cpu`."""
        if self.cuda is None:
            return f"torch=={self.torch_version}+cpu"
        return f"torch==={self.torch_version}"

    def torch_index_requirement(self) -> str:
        """The same torch, labelled as on the PyTorch index (`2.7.1+cu126`)."""
        return f"torch=={self.torch_version}+{self.compute}"


@dataclass(frozen=True)
class Matrix:
    path: Path
    envs: tuple[EnvSpec, ...]
    aliases: tuple[str, ...] = ()    # other pixi environments (e.g. `default`)
    platforms: tuple[str, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    default: bool = False            # the builder's own matrix, used for lack of a pixi.toml
    tool: KbuildTool = field(default_factory=KbuildTool, repr=False, compare=False)  # [tool.kbuild]

    @property
    def locks(self) -> Path:
        return self.path.parent / LOCKS_DIR

    def get(self, name: str) -> EnvSpec:
        for env in self.envs:
            if env.name == name:
                return env
        raise BuildError(f"no environment {name!r}", file=self.path, key="environments",
                         hint="`kbuild envs --list` shows them")

    def select(self, only: list[str] | None = None, skip: list[str] | None = None) -> list[EnvSpec]:
        """Environments matching any `only` pattern (all if none) and no `skip` pattern."""
        def hit(env: EnvSpec, pats: list[str]) -> bool:
            return any(fnmatch.fnmatchcase(env.name, p) or fnmatch.fnmatchcase(env.variant(), p)
                       for p in pats)
        pats = [p.strip() for arg in (only or []) for p in arg.split(",") if p.strip()]
        skips = [p.strip() for arg in (skip or []) for p in arg.split(",") if p.strip()]
        for p in pats:
            if not any(hit(e, [p]) for e in self.envs):
                raise BuildError(f"--only {p!r} matches no environment", file=self.path,
                                 hint="`kbuild envs --list` shows the environments")
        return [e for e in self.envs if (not pats or hit(e, pats)) and not hit(e, skips)]


def _version_pin(spec: str | None, where: str, path: Path) -> str:
    pins = [s for s in SpecifierSet(spec or "") if s.operator in ("==", "===")]
    if len(pins) != 1 or "*" in pins[0].version:
        raise BuildError(f"torch must be pinned to one release (`==X.Y.Z`), got {spec!r}",
                         file=path, key=where)
    return pins[0].version


def _cuda_version(spec: str, where: str, path: Path) -> str:
    m = re.fullmatch(r"=?=?\s*(\d+)\.(\d+)(\.\*)?", spec.strip())
    if not m:
        raise BuildError(f"cuda-version must look like \"12.6.*\", got {spec!r}", file=path,
                         key=where)
    return f"{m.group(1)}.{m.group(2)}"


def _pypi_requirement(name: str, spec: Any) -> str | None:
    """A PEP 508 string for a pixi PyPI dependency; None for path/git/url sources."""
    if isinstance(spec, str):
        return name if spec.strip() in ("", "*") else f"{name}{spec}"
    if isinstance(spec, dict) and not ({"path", "git", "url"} & spec.keys()):
        extras = f"[{','.join(spec['extras'])}]" if spec.get("extras") else ""
        version = spec.get("version", "")
        return f"{name}{extras}{'' if version in ('', '*') else version}"
    return None


def load(path: Path) -> Matrix:
    """Parses `pixi.toml` (a file, or a folder holding one) into the variant matrix; a folder
    without one gets the builder's default matrix."""
    if path.is_dir() and not (path / PIXI_TOML).is_file():
        return _parse(DEFAULT_MATRIX, builtin=True)
    return _parse(path / PIXI_TOML if path.is_dir() else path)


def load_or_default(project: Path, matrix: Path | None, note: Callable[[str], None]) -> Matrix:
    """`--matrix FILE`, else PROJECT/pixi.toml, else the builder's default matrix (said in
    `note`)."""
    mx = load(matrix or project)
    if mx.default:
        note(f"{project} has no pixi.toml: using the builder's default matrix ({mx.path})")
    return mx


def _parse(path: Path, builtin: bool = False) -> Matrix:
    if not path.is_file():
        raise BuildError(f"{path} not found", hint="the environment matrix lives in pixi.toml "
                                                   "at the project root")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise BuildError(f"invalid TOML: {e}", file=path) from None
    workspace = raw.get("workspace") or raw.get("project") or {}
    ws_platforms = tuple(p if isinstance(p, str) else p.get("platform", p.get("name"))
                         for p in workspace.get("platforms", []))
    features: dict[str, dict] = dict(raw.get("feature", {}))
    default = {k: raw[k] for k in ("dependencies", "pypi-dependencies", "activation", "target")
               if k in raw}
    tool = tool_settings(raw, path)

    envs, aliases = [], []
    for name, env in (raw.get("environments") or {}).items():
        if isinstance(env, list):
            env = {"features": env}
        m = ENV_NAME_RE.match(name)
        if not m:
            aliases.append(name)
            continue
        where = f"environments.{name}"
        feats = [features.get(f) for f in env.get("features", [])]
        missing = [f for f, body in zip(env.get("features", []), feats) if body is None]
        if missing:
            raise BuildError(f"environment {name} uses undefined feature(s) {missing}",
                             file=path, key=where)
        layers = ([] if env.get("no-default-feature") else [default]) + feats
        torch_spec, cuda, python, extra = None, None, None, []
        for layer in layers:
            for dep, spec in layer.get("pypi-dependencies", {}).items():
                if dep == "torch":
                    torch_spec = spec
                else:
                    req = _pypi_requirement(dep, spec)
                    if req:
                        extra.append(req)
            deps = layer.get("dependencies", {})
            if "cuda-version" in deps:
                cuda = _cuda_version(str(deps["cuda-version"]), f"{where}.cuda-version", path)
            if "python" in deps:
                python = str(deps["python"])
        if torch_spec is None:
            raise BuildError(f"environment {name} has no torch", file=path, key=where,
                             hint="add a feature with a `torch` PyPI dependency")
        version = torch_spec if isinstance(torch_spec, str) else torch_spec.get("version")
        torch_version = _version_pin(version, f"{where}.torch", path)
        index = torch_spec.get("index") if isinstance(torch_spec, dict) else None
        platforms = tuple(env.get("platforms") or ws_platforms)
        wheels: tuple[str, ...] = ()
        reason = None
        if cuda:
            major = cuda.split(".")[0]
            wheels = tuple(w.replace("{cuda}", cuda) for w in tool.pypi.toolkit.get(major, []))
            if not wheels:
                reason = tool.pypi.no_toolkit.get(
                    major, f"no toolkit wheels for CUDA {major} in [tool.kbuild.pypi.toolkit]")
        envs.append(EnvSpec(
            name=name, torch_version=torch_version, torch_index=index, cuda=cuda,
            platforms=platforms, features=tuple(env.get("features", [])),
            solve_group=env.get("solve-group"), python=python, pypi_extra=tuple(extra),
            toolkit_wheels=wheels, no_toolkit_reason=reason, locks=path.parent / LOCKS_DIR))
    return Matrix(path=path, envs=tuple(envs), aliases=tuple(aliases), platforms=ws_platforms,
                  raw=raw, default=builtin, tool=tool)


def name_problems(env: EnvSpec) -> list[str]:
    """Ways in which an environment's pins disagree with its name (empty when they agree)."""
    m = ENV_NAME_RE.match(env.name)
    problems = []
    if not m:
        return [f"{env.name}: name is not torch<MAJ><MIN>-<cuXY|cpu>"]
    major, minor, compute = int(m.group(1)), int(m.group(2)), m.group(3)
    if (env.release.major, env.release.minor) != (major, minor):
        problems.append(f"{env.name}: torch is pinned to {env.torch_version}")
    if env.compute != compute:
        problems.append(f"{env.name}: toolkit gives {env.compute}")
    if env.torch_index and not env.torch_index.rstrip("/").endswith("/" + compute):
        problems.append(f"{env.name}: torch comes from {env.torch_index}, not a {compute} index")
    return problems

