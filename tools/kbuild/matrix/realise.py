"""The environment stage for the matrix: an environment of pixi.toml made real, by pixi or from PyPI.

Both realisers answer the same questions, so `build-all` only schedules:
`annotate(specs)` (can each be realised here, and why not), `realise(spec)` (create or reuse
it) and `build_command(realised, args)` (how to run `kbuild build` inside it).
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from ..core.errors import BuildError
from . import envs as pypi
from .lock import states as lock_states
from .matrix import EnvSpec, Matrix

Log = Callable[[str], None]
# Runs a command interruptibly with its output in a log; returns the exit status.
Call = Callable[[str, list[str], Path], int]


@dataclass(frozen=True)
class RealisedEnv:
    spec: EnvSpec
    key: str                    # the environment's pins: a change rebuilds its variant
    python: str | None = None   # its interpreter (None: pixi runs kbuild itself)
    cuda_home: Path | None = None
    created: bool = False
    seconds: float = 0.0


class Realiser(Protocol):
    via: str

    def annotate(self, specs: list[EnvSpec]) -> list[EnvSpec]: ...

    def prepare(self, specs: list[EnvSpec]) -> None: ...

    def realise(self, spec: EnvSpec, log: Log, call: Call) -> RealisedEnv: ...

    def build_command(self, real: RealisedEnv, args: list[str]) -> tuple[list[str], dict[str, str]]: ...


class PixiRealiser:
    """`pixi install -e ENV`, then `pixi run -e ENV kbuild ...`; the key is pixi.lock's hash."""

    via = "pixi"

    def __init__(self, matrix: Matrix, log_dir: Path) -> None:
        self.matrix = matrix
        self.log_dir = log_dir

    def annotate(self, specs: list[EnvSpec]) -> list[EnvSpec]:
        return specs

    def prepare(self, specs: list[EnvSpec]) -> None:
        pass

    def realise(self, spec: EnvSpec, log: Log, call: Call) -> RealisedEnv:
        start = time.monotonic()
        env_log = self.log_dir / f"{spec.name}.env.log"
        cmd = ["pixi", "install", "--manifest-path", str(self.matrix.path), "-e", spec.name]
        if call(spec.name, cmd, env_log) != 0:
            raise BuildError(f"pixi install -e {spec.name} failed; log: {env_log}")
        lock = self.matrix.path.with_name("pixi.lock")
        key = hashlib.sha256((lock if lock.is_file() else self.matrix.path).read_bytes()).hexdigest()
        return RealisedEnv(spec, f"pixi:{key[:16]}", seconds=time.monotonic() - start)

    def build_command(self, real: RealisedEnv, args: list[str]) -> tuple[list[str], dict[str, str]]:
        return (["pixi", "run", "--manifest-path", str(self.matrix.path), "-e", real.spec.name,
                 "kbuild", *args], {})


class PypiRealiser:
    """A cached virtual environment per environment (envs.py), from its lock when it has one."""

    via = "pypi"

    def __init__(self, envs_dir: Path, log_dir: Path, torch_index: bool = False,
                 locked: bool = False) -> None:
        self.envs_dir = envs_dir
        self.log_dir = log_dir
        self.torch_index = torch_index
        self.locked = locked
        self.installer = pypi.installer()
        self.sccache: Path | None = None

    def annotate(self, specs: list[EnvSpec]) -> list[EnvSpec]:
        return pypi.annotate(specs, self.envs_dir, self.installer, self.torch_index)

    def prepare(self, specs: list[EnvSpec]) -> None:
        """Refuses stale locks before anything is built; a compiler cache shared by the
        environments (sccache), when any will build."""
        for spec in specs:
            for state in lock_states(spec):
                if state.state == "stale":
                    raise BuildError(state.problem, file=state.path, key="tool.kbuild.inputs",
                                     hint=state.fix)
        if any(s.available is None or s.available.ok for s in specs):
            self.sccache = pypi.sccache(self.envs_dir, self.installer)

    def realise(self, spec: EnvSpec, log: Log, call: Call) -> RealisedEnv:
        if spec.available is not None and not spec.available.ok:
            raise Unavailable(spec.available.reason)
        real = pypi.realise(spec, self.envs_dir, inst=self.installer, log=log,
                            log_dir=self.log_dir, torch_index=self.torch_index, locked=self.locked)
        return RealisedEnv(spec, pypi.env_key(spec, self.envs_dir) or "", str(real.python),
                           real.cuda_home, real.created, real.seconds)

    def build_command(self, real: RealisedEnv, args: list[str]) -> tuple[list[str], dict[str, str]]:
        extra: dict[str, str] = {}
        if self.sccache:
            extra["KBUILD_COMPILER_CACHE"] = str(self.sccache)
        toolkit = ["--cuda-home", str(real.cuda_home)] if real.cuda_home else []
        return [sys.executable, "-m", "kbuild", *args, "--python", str(real.python), *toolkit], extra


class Unavailable(BuildError):
    """The environment cannot be realised on this machine (reported, not a failure)."""


def pixi_available(matrix: Matrix) -> bool:
    return bool(shutil.which("pixi")) and matrix.path.is_file() and not matrix.default


def realiser(via: str, matrix: Matrix, *, envs_dir: Path, log_dir: Path,
             torch_index: bool = False, locked: bool = False) -> Realiser:
    """`via`: pixi, pypi, or auto (pixi when installed and the project has its own pixi.toml)."""
    if via == "auto":
        via = "pixi" if pixi_available(matrix) else "pypi"
    if via == "pixi":
        if matrix.default:
            raise BuildError("--via pixi needs the project's own pixi.toml", file=matrix.path,
                             hint=f"copy {matrix.path} to the project as pixi.toml")
        return PixiRealiser(matrix, log_dir)
    return PypiRealiser(envs_dir, log_dir, torch_index, locked)

