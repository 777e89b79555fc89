"""A new, buildable kernel project (`kbuild init PATH`) from the templates in resources/init/:
build.toml, the kernels and their binding, a Python wrapper, tests, a benchmark, CARD.md, the CI
workflow (workflows/writer.py) and pixi.toml with the builder's default environment matrix."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path
from typing import Callable

from ..core.backend import SCAFFOLD_BACKENDS, Backend
from ..core.errors import BuildError
from ..core.layout import MANIFEST, PIXI_TOML
from ..core.manifest import NAME_RE
from ..core.manifest.forms import repo_id as repo_id_rule
from ..core.deps import stderr_warning
from ..workflows import writer as workflows

Log = Callable[[str], None]

TEMPLATES = resources.files("kbuild") / "resources" / "init"
RESOURCES = Path(str(resources.files("kbuild") / "resources"))
# The environment matrix a new project's pixi.toml starts from: the default matrix that ships
# with the builder, else (in a checkout without one) the builder repository's own pixi.toml.
DEFAULT_MATRIX = RESOURCES / "matrix" / PIXI_TOML  # the matrix that ships with the builder
BUILDER = "pixi-kernel-builder"
LOCKS = "locks"  # PEP 751 locks of the matrix's environments, next to its pixi.toml


@dataclass(frozen=True)
class InitOptions:
    name: str              # "my-kernel"
    repo_id: str           # "org/my-kernel"
    backends: tuple[Backend, ...]
    noarch: bool

    @property
    def module(self) -> str:
        return self.name.replace("-", "_")

    def context(self, matrix_envs: list[str]) -> dict:
        cuda_envs = [e for e in matrix_envs if "-cu" in e]
        return {"name": self.name, "module": self.module, "op": self.module,
                "class_name": "".join(p.capitalize() for p in self.name.split("-")),
                "repo_id": self.repo_id, "backends": list(self.backends), "noarch": self.noarch,
                "has_cpu": Backend.CPU in self.backends, "has_cuda": Backend.CUDA in self.backends,
                "example_env": (cuda_envs or matrix_envs or ["default"])[-1]}


def scaffold_files(opts: InitOptions) -> dict[str, str]:
    """Path in the new project → template (under resources/init/)."""
    m = opts.module
    files = {MANIFEST: "build.noarch.toml.j2" if opts.noarch else "build.toml.j2",
             "CARD.md": "CARD.md.j2", ".gitignore": "gitignore.j2",
             f"torch-ext/{m}/__init__.py": ("noarch/__init__.py.j2" if opts.noarch
                                            else "torch-ext/__module__/__init__.py.j2"),
             "tests/conftest.py": "tests/conftest.py.j2",
             f"tests/test_{m}.py": "tests/test___module__.py.j2",
             f"benchmarks/benchmark_{m}.py": "benchmarks/benchmark___module__.py.j2"}
    if not opts.noarch:
        files.update({"torch-ext/torch_binding.cpp": "torch-ext/torch_binding.cpp.j2",
                      "torch-ext/torch_binding.h": "torch-ext/torch_binding.h.j2",
                      f"csrc/{m}.h": "csrc/__module__.h.j2"})
        if Backend.CPU in opts.backends:
            files[f"csrc/{m}_cpu.cpp"] = "csrc/__module___cpu.cpp.j2"
        if Backend.CUDA in opts.backends:
            files[f"csrc/{m}_cuda.cu"] = "csrc/__module___cuda.cu.j2"
    return files


def render(opts: InitOptions, matrix_envs: list[str]) -> dict[str, str]:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda name: (TEMPLATES / name).read_text(encoding="utf-8")),
        keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
        undefined=jinja2.StrictUndefined)
    ctx = opts.context(matrix_envs)
    return {path: env.get_template(tpl).render(ctx) for path, tpl in scaffold_files(opts).items()}


def builder_source() -> Path | None:
    """The folder this builder was installed from (a checkout's tools/, or the local path a
    pip/uv/pipx install recorded in direct_url.json); None for an index install."""
    tools = Path(__file__).resolve().parents[2]
    if (tools / "pyproject.toml").is_file():
        return tools
    try:
        direct = json.loads(metadata.distribution(BUILDER).read_text("direct_url.json") or "{}")
    except metadata.PackageNotFoundError:
        return None
    url = direct.get("url", "")
    return Path(url.removeprefix("file://")) if url.startswith("file://") else None


def project_matrix(opts: InitOptions, matrix_file: Path = DEFAULT_MATRIX,
                   warn: Log = stderr_warning) -> tuple[str, list[str]]:
    """The new project's pixi.toml (the default matrix, renamed, the builder from where this
    one came from) and its environment names."""
    import tomlkit

    from ..matrix import matrix as matrix_mod

    lines = matrix_file.read_text(encoding="utf-8").splitlines(keepends=True)
    while lines and (lines[0].startswith("#") or not lines[0].strip()):
        lines.pop(0)  # the builder's own header comment
    doc = tomlkit.parse("".join(lines))
    workspace = doc.get("workspace") or doc.get("project")
    workspace["name"] = opts.name
    workspace["description"] = f"{opts.name} kernel, built for every torch x toolkit variant"
    source = builder_source()
    dep = tomlkit.inline_table()
    if source is not None:
        dep.update({"path": str(source), "editable": True, "extras": ["test"]})
    else:
        from .. import __version__
        dep.update({"version": f"=={__version__}", "extras": ["test"]})
        warn(f"{PIXI_TOML}: set the source of {BUILDER} (it is not on PyPI)")
    doc.setdefault("pypi-dependencies", tomlkit.table())[BUILDER] = dep
    tasks = doc.setdefault("tasks", tomlkit.table())
    for name, task in tomlkit.parse((TEMPLATES / "pixi-tasks.toml").read_text())["tasks"].items():
        if name not in tasks:
            tasks[name] = task
    header = ("# Build environments, one per variant, from pixi-kernel-builder's default matrix:\n"
              "# `pixi run -e <environment> dev` builds that environment's variant and runs tests/,\n"
              "# `kbuild build-all` builds them all (through pixi, or realised from PyPI).\n\n")
    text = header + tomlkit.dumps(doc)
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / PIXI_TOML
        probe.write_text(text, encoding="utf-8")
        envs = [e.name for e in matrix_mod.load(probe).envs]
    return text, envs


def parse_backends(values: list[str] | None) -> tuple[Backend, ...]:
    chosen: list[str] = []
    for item in values or [",".join(SCAFFOLD_BACKENDS)]:
        for b in item.split(","):
            b = b.strip().lower()
            if b and b not in chosen:
                chosen.append(b)
    unknown = [b for b in chosen if b not in SCAFFOLD_BACKENDS]
    if unknown or not chosen:
        raise BuildError(f"--backends {','.join(unknown) or '(none)'}: the scaffold has kernels for "
                         f"{' and '.join(SCAFFOLD_BACKENDS)}",
                         hint=f"pick from {','.join(SCAFFOLD_BACKENDS)} (add other backends to "
                              "build.toml by hand)")
    return tuple(b for b in SCAFFOLD_BACKENDS if b in chosen)


def check_repo_id(value: str) -> str:
    """The manifest's rule for `general.hub.repo-id`, applied before anything is written (the
    value lands in build.toml and CARD.md)."""
    try:
        return repo_id_rule(value)
    except ValueError:
        raise BuildError(f"--repo-id {value!r} is not a Hub repo id: expected org/name",
                         hint="letters, digits, `-`, `_` and `.` on each side of one `/`; no `..` "
                              "or `--`; at most 96 characters each") from None


def create(target: Path, opts: InitOptions, *, git: bool = True,
           matrix_file: Path = DEFAULT_MATRIX, warn: Log = stderr_warning) -> list[str]:
    """Writes the project into `target` (which must not exist, or be an empty folder, and is no
    symbolic link), all at once: the files are written next to it and renamed into place.
    Returns the files written."""
    check_repo_id(opts.repo_id)
    if target.is_symlink():
        raise BuildError(f"{target} is a symbolic link (to {os.readlink(target)}); kbuild init "
                         "writes a new folder, never through a link",
                         hint="choose another path, or remove the link first")
    if target.exists() and not (target.is_dir() and not any(target.iterdir())):
        raise BuildError(f"{target} already exists; kbuild init never overwrites (choose another "
                         "name, or remove it first)")
    if matrix_file.is_file():
        pixi, envs = project_matrix(opts, matrix_file, warn)
    else:
        warn(f"no {PIXI_TOML} written: this builder has no default environment matrix "
             f"({matrix_file} is missing)")
        pixi, envs = None, []
    files = render(opts, envs)
    files[workflows.PROJECT_WORKFLOW] = workflows.project_workflow(warn)
    if pixi is not None:
        files[PIXI_TOML] = pixi
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    except OSError as e:
        raise BuildError(f"cannot create {target}: {e.strerror} ({e.filename})",
                         hint="choose another path") from None
    try:
        for rel, text in files.items():
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            (staging / rel).write_text(text, encoding="utf-8")
        locks = matrix_file.parent / LOCKS
        if pixi is not None and locks.is_dir():  # the matrix's environment locks, if it has any
            shutil.copytree(locks, staging / LOCKS)
        staging.chmod(0o777 & ~workflows.umask())
        try:  # the whole project renamed into place, not core/files.write_atomic's one file
            os.rename(staging, target)
        except OSError as e:  # it appeared meanwhile, or its folder refuses it
            raise BuildError(f"cannot create {target}: {e.strerror}",
                             hint="choose another path") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if git:
        _git_init(target)
    return sorted(files)


def _git_init(target: Path) -> None:
    """Like kernel-builder's init: a git repository with the files staged (not committed)."""
    from ..core.runner import capture
    if shutil.which("git") is None:
        return
    if capture(["git", "init", "-q", str(target)]).returncode == 0:
        capture(["git", "-C", str(target), "add", "-A"])


def options(path: Path, backends: list[str] | None, noarch: bool,
            repo_id: str | None) -> tuple[Path, InitOptions]:
    """`kbuild init`'s arguments as the folder to write and the project's options; a name or a
    repo id that is not one is refused before anything is written."""
    target = path if path.is_absolute() else Path.cwd() / path
    name = target.name.replace("_", "-")
    if not NAME_RE.match(name):
        raise BuildError(f"{target.name!r} is not a kernel name: use lowercase letters, digits and "
                         "dashes, starting with a letter (e.g. my-kernel)")
    repo = check_repo_id(repo_id or f"your-org/{name}")
    return target, InitOptions(name=name, repo_id=repo, backends=parse_backends(backends),
                               noarch=noarch)


def next_steps(target: Path, opts: InitOptions, *, repo_id_given: bool) -> list[str]:
    """What `kbuild init` says once the project is written."""
    kind = "noarch (Python)" if opts.noarch else " + ".join(b.upper() for b in opts.backends)
    lines = [f"created {target} ({kind} kernel `{opts.module}`, Hub repo {opts.repo_id})",
             "next:",
             f"  cd {os.path.relpath(target)}",
             "  kbuild dev                # build for this torch, then run tests/",
             "  kbuild check              # metadata, digest, ABI and a real load"]
    if Backend.CUDA in opts.backends and not opts.noarch:
        lines.append("  kbuild build --python ENV/bin/python   # a CUDA variant (torch with CUDA + nvcc)")
    lines.append("  kbuild build-all          # every environment of pixi.toml")
    if not repo_id_given:
        lines.append(f"  (set [general.hub] repo-id in {MANIFEST} before `kbuild upload`)")
    return lines
