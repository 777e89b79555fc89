"""How environments get their packages: uv (told pip's own configuration) or pip.

uv is used when installed (it is a dependency of the builder); it is handed pip's configured
indexes, find-links, constraints and certificate (`pip config list`) and
`--index-strategy unsafe-best-match`, so it sees exactly the wheels `pip install` sees.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ..core.errors import BuildError
from ..core.runner import Timeout, capture, run_logged
from .lockfile import PLATFORM_TAGS, Lock, host_platform


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
    except Timeout:
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

    def _uv_args(self, extra_indexes: list[str], constraints: bool = True) -> list[str]:
        args = ["--index-strategy", "unsafe-best-match"]
        for url in extra_indexes + self.config.get("extra-index-url", []):
            args += ["--extra-index-url", url]
        if self.config.get("index-url"):
            args += ["--index-url", self.config["index-url"][0]]
        for link in self.config.get("find-links", []):
            args += ["--find-links", link]
        for c in self.config.get("constraint", []) if constraints else []:
            args += ["--constraint", c]
        return args

    def lock_args(self, extra_indexes: list[str]) -> list[str]:
        """Sources for a lock: remote indexes only (a local mirror's file URLs mean nothing
        elsewhere), pip's find-links for files no index has, and pip's constraints."""
        remote = [u for u in extra_indexes + self.config.get("extra-index-url", [])
                  if not u.startswith("file:")]
        args = ["--index-strategy", "unsafe-best-match"]
        for url in remote:
            args += ["--extra-index-url", url]
        index = self.config.get("index-url", [])
        if index and not index[0].startswith("file:"):
            args += ["--index-url", index[0]]
        for link in self.config.get("find-links", []):
            args += ["--find-links", link]
        for c in self.config.get("constraint", []):
            args += ["--constraint", c]
        return args

    def compile_lock(self, requirements: list[str], python: str, platform: str, indexes: list[str], *,
                     what: str, timeout: float, constraints: list[str] = (),
                     find_links: list[str] = ()) -> str:
        """PEP 751 text: `requirements` resolved by uv for `platform` (a `PLATFORM_TAGS` key) and
        `python`, from the sources of a lock (`lock_args`), `find_links` and pinned
        `constraints` added. `what` names the lock in an error."""
        if self.kind != "uv":
            raise BuildError("`kbuild lock` needs uv", hint="pip install uv")
        if platform not in PLATFORM_TAGS:
            raise BuildError(f"cannot lock for {platform}", hint=f"platforms: {', '.join(PLATFORM_TAGS)}")
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "pylock.toml"
            extra = [arg for link in find_links for arg in ("--find-links", link)]
            if constraints:
                (Path(tmp) / "pins.txt").write_text("\n".join(constraints) + "\n")
                extra += ["--constraint", str(Path(tmp) / "pins.txt")]
            cmd = [self.uv, "pip", "compile", "-", "--quiet", "--format", "pylock.toml", "--no-header",
                   "--python-version", python, "--python-platform", PLATFORM_TAGS[platform],
                   "-o", str(out), *self.lock_args(indexes), *extra]
            proc = capture(cmd, input="\n".join(requirements) + "\n", env=self._env(), timeout=timeout)
            if proc.returncode != 0:
                raise BuildError(f"{what}: {_last_error(proc.stderr)}",
                                 hint="`kbuild envs --list` says what is missing here")
            return out.read_text()

    def locked_requirements(self, lock: Lock) -> list[str]:
        """The hash-pinned requirement lines `install_locked` installs, after every check that
        can be made before anything is created: the lock's platform and Python are this
        machine's, pip's constraints here allow its pins, its markers evaluate here."""
        if lock.platform != host_platform():
            raise BuildError(f"{lock.path.name} is for {lock.platform}, this machine is "
                             f"{host_platform()}", file=lock.path, key="tool.kbuild.platform",
                             hint=f"kbuild lock --platform {host_platform()}")
        here = "%d.%d" % sys.version_info[:2]
        if lock.python != here:
            raise BuildError(f"{lock.path.name} is locked for Python {lock.python}, kbuild "
                             f"runs on {here}", file=lock.path, key="tool.kbuild.python",
                             hint=f"run kbuild with Python {lock.python}")
        self.check_constraints(lock)
        return lock.requirement_lines()

    def install_locked(self, path: Path, lock: Lock, log_file: Path,
                       indexes: list[str] = ()) -> None:
        """Exactly the files of `lock`: hash-checking mode, no dependency resolution. The indexes
        are the matrix's (`indexes`, with pip's configured ones, a local mirror too), never the
        lock's own record: the hashes decide."""
        lines = self.locked_requirements(lock)
        req = path.with_name(path.name + ".requirements.txt")
        req.write_text("\n".join(lines) + "\n")
        try:
            if self.kind == "uv":
                cmd = [self.uv, "pip", "install", "--python", str(venv_python(path)),
                       "--require-hashes", "--no-deps", "--python-platform",
                       PLATFORM_TAGS[lock.platform],
                       *self._uv_args(list(indexes), constraints=False), "-r", str(req)]
            else:
                cmd = [str(venv_python(path)), "-m", "pip", "install", "--no-input", "--require-hashes",
                       "--no-deps", "--only-binary", ":all:", "--disable-pip-version-check"]
                for url in indexes:
                    cmd += ["--extra-index-url", url]
                cmd += ["-r", str(req)]
            run(cmd, log_file, f"installing {lock.path.name} (hash-checked)", env=self._env())
        finally:
            req.unlink(missing_ok=True)

    def constraints(self) -> list[tuple[str, str, Requirement]]:
        """pip's constraints here: (file, line, requirement) of each line that is one."""
        found = []
        for file in self.config.get("constraint", []):
            try:
                lines = Path(file).read_text().splitlines()
            except OSError:
                continue
            for line in lines:
                line = line.split("#")[0].strip()
                try:
                    found.append((file, line, Requirement(line)))
                except InvalidRequirement:
                    continue  # blank, or an option line (-c, -r)
        return found

    def excluding_constraint(self, name: str, version: str) -> tuple[str, str] | None:
        """(file, line) of pip's constraint here that excludes `name` at `version`, if any."""
        for file, line, req in self.constraints():
            if canonicalize_name(req.name) == canonicalize_name(name) and \
                    not req.specifier.contains(version, prereleases=True):
                return file, line
        return None

    def check_constraints(self, lock: Lock) -> None:
        """pip's constraints hold for a lock too (hash-checking mode can't take them)."""
        for package in lock.packages:
            hit = self.excluding_constraint(package.name, package.version)
            if hit:
                raise BuildError(f"{lock.path.name} pins {package.name} {package.version}, which "
                                 f"pip's constraint `{hit[1]}` in {hit[0]} excludes here",
                                 file=lock.path, key="packages",
                                 hint="lock with this machine's constraints")

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

    def install_target(self, target: Path, python: str, requirements: list[str],
                       log_file: Path) -> None:
        """Pure-Python packages into a plain folder, for `python` to find on PYTHONPATH."""
        if self.kind == "uv":
            cmd = [self.uv, "pip", "install", "--target", str(target), "--python", python,
                   *self._uv_args([]), *requirements]
        else:
            cmd = [sys.executable, "-m", "pip", "install", "--no-input", "--quiet",
                   "--disable-pip-version-check", "--target", str(target), *requirements]
        run(cmd, log_file, "installing " + " ".join(requirements), env=self._env())

    @staticmethod
    def install_beside(python: str, prefix: Path, requirements: list[str], holds: dict[str, str],
                       log_file: Path) -> list[str]:
        """What `requirements` add to the environment of `python` (whose distributions are
        `holds`, canonical name → version), installed under `prefix` and never into that
        environment; returns the pins installed. pip does it for any installer: run against
        `python` (`pip --python`), it resolves against what the environment holds (uv's
        --target and --prefix ignore it and would add a second torch). A dry run says what
        would be added; a package the environment holds at another version is refused, and
        only the rest is installed, each at its resolved version, without dependencies."""
        import importlib.util
        if importlib.util.find_spec("pip") is None:
            raise BuildError(f"pip is missing from kbuild's own environment ({sys.executable}); "
                             f"it installs the tests' {', '.join(requirements)} beside the "
                             "environment", hint="pip install pip (where kbuild is installed)")
        pip = [sys.executable, "-m", "pip", "--python", python]
        quiet = ["--no-input", "--disable-pip-version-check", "--quiet"]
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "report.json"
            proc = capture([*pip, "install", *quiet, "--dry-run", "--report", str(report),
                            *requirements], timeout=600)
            if proc.returncode != 0:
                raise BuildError(f"the tests' requirements ({', '.join(requirements)}) could not "
                                 f"be resolved for {python}: {_last_error(proc.stderr)}",
                                 hint="check pip's index configuration (`pip config list`), or "
                                      "install them into the environment")
            plan = [(i["metadata"]["name"], i["metadata"]["version"])
                    for i in json.loads(report.read_text())["install"]]
        for name, version in plan:
            held = holds.get(canonicalize_name(name))
            if held is not None:
                raise BuildError(f"the tests' requirements ({', '.join(requirements)}) need "
                                 f"{name} {version}, and the environment of {python} holds "
                                 f"{name} {held}; kbuild does not change an environment",
                                 hint="add the requirement to the environment (pixi.toml, then "
                                      "`kbuild lock`), or relax it")
        pins = [f"{name}=={version}" for name, version in plan]
        if pins:
            run([*pip, "install", *quiet, "--no-deps", "--no-warn-script-location", "--prefix",
                 str(prefix), *pins], log_file, "installing " + " ".join(pins), env=None)
        return pins

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
