"""Helpers for the builder's tests: project copies and the CLI (imported by name, not via conftest)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import signal
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROJECT_PARTS = ("build.toml", "csrc", "torch-ext")


def copy_project(dst: Path, src: Path = REPO) -> Path:
    """A copy of the img2gray project outside git (uid from a content hash)."""
    dst.mkdir(parents=True, exist_ok=True)
    for part in PROJECT_PARTS:
        if (src / part).is_dir():
            shutil.copytree(src / part, dst / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src / part, dst / part)
    return dst


def one_arch(project: Path) -> None:
    """img2gray for one GPU architecture: the same code paths, a tenth of the nvcc time."""
    manifest = project / "build.toml"
    manifest.write_text(manifest.read_text().replace(
        '[kernel.img2gray_cuda]\nbackend = "cuda"\n',
        '[kernel.img2gray_cuda]\nbackend = "cuda"\ncuda-capabilities = ["9.0"]\n'))
    assert 'cuda-capabilities = ["9.0"]' in manifest.read_text()


def _wipe(folder: Path) -> None:
    if folder.is_symlink() or folder.is_file():
        folder.unlink()
    elif folder.exists():
        for p in [folder, *folder.rglob("*")]:  # a test may leave read-only files behind
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(folder)


def _stable(name: str) -> Path | None:
    """The folder for `name` under the run's work folder (see the repository's conftest.py),
    None when this run has none."""
    root = os.environ.get("KBUILD_TEST_WORK")
    if not root:
        return None
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", name.rsplit("/", 1)[-1])[:60]
    return Path(root) / f"{readable}-{digest}"


def work_folder(name: str, fallback: Path) -> Path:
    """An empty folder whose path is the same in every run of this checkout (builds in it hit
    the compiler cache when the suite runs again), or `fallback` when the run has none."""
    folder = _stable(name)
    if folder is None:
        fallback.mkdir(parents=True, exist_ok=True)
        return fallback
    _wipe(folder)
    folder.mkdir(parents=True)
    return folder


_SHARED: dict[str, Path] = {}


def shared_folder(key: str, make, fallback) -> Path:
    """The folder `make(folder)` filled, once per test run for all worker processes (the first
    to ask makes it, the others wait for it), in the run's work folder; without one, once per
    process in `fallback()`. Tests only read what it holds (or copy it: fresh_copy)."""
    if key in _SHARED:
        return _SHARED[key]
    folder = _stable(f"shared-{key}")
    if folder is None:
        folder = fallback()
        make(folder)
    else:
        folder.parent.mkdir(parents=True, exist_ok=True)
        stamp = folder.with_name(folder.name + ".run")
        with open(folder.with_name(folder.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            run = os.environ.get("KBUILD_TEST_RUN", "")
            if not (run and stamp.is_file() and stamp.read_text() == run):
                stamp.unlink(missing_ok=True)
                _wipe(folder)
                folder.mkdir()
                make(folder)
                stamp.write_text(run)
    _SHARED[key] = folder
    return folder


def built_img2gray(make_root, key: str = "base", *, version: int = 1,
                   marker: str | None = None) -> Path:
    """A copy of img2gray (outside git) with its CPU variant built, made once per test run and
    key, whichever test module or worker asks: `make_root()` gives a fresh folder when the run
    has no work folder. `version` changes general.version; `marker` changes the source (so the
    kernel id). Read it, or take a fresh_copy to change it."""
    def make(root: Path) -> None:
        from kbuild.stages import pipeline
        project = copy_project(root / "img2gray")
        if version != 1:
            toml = project / "build.toml"
            toml.write_text(toml.read_text().replace("version = 1", f"version = {version}", 1))
        if marker is not None:
            init = project / "torch-ext" / "img2gray" / "__init__.py"
            init.write_text(init.read_text() + f"\nKERNEL_MARKER = {marker!r}\n")
        pipeline.build(project, backends=["cpu"])
    return shared_folder(f"img2gray-{key}-{version}-{marker}", make, make_root) / "img2gray"


def fresh_copy(built: Path, dst: Path, parts=("build.toml", "csrc", "torch-ext", "build")) -> Path:
    """A writable copy of a built project (sources + build/), outside git."""
    dst.mkdir(parents=True, exist_ok=True)
    for part in parts:
        src = built / part
        if src.is_dir():
            shutil.copytree(src, dst / part, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dst / part)
    return dst


def as_variant(variant: Path, name: str) -> Path:
    """A copy of a built variant folder next to it as variant `name` (a name of the same length),
    as a build for that variant would have made it: the name its `.so` records (which check
    compares with the folder's) and the digest follow."""
    import json

    from kbuild.core.built import digest_files
    other = variant.with_name(name)
    shutil.copytree(variant, other)
    for so in other.glob("*.so"):
        data = so.read_bytes()
        old, new = variant.name.encode() + b"\0", name.encode() + b"\0"
        assert len(old) == len(new) and data.count(old) == 1, (variant.name, name)
        so.write_bytes(data.replace(old, new))
    meta = json.loads((other / "metadata.json").read_text())
    meta["digest"]["files"] = digest_files(other)
    (other / "metadata.json").write_text(json.dumps(meta, indent=2))
    return other


def cached(cmd: list[str]) -> list[str]:
    """`cmd` (a compile) through the run's compiler cache, as builds use it (see conftest.py)."""
    from kbuild.stages.compile import compiler_launcher
    launcher = compiler_launcher()
    return [launcher, *cmd] if launcher else cmd


def kbuild(*args, cwd: Path | None = None, env: dict | None = None, timeout: float = 900,
           inherit: bool = True) -> subprocess.CompletedProcess:
    """`python -m kbuild ARGS` in a new process, as a user runs it: `env` added to this process's
    environment, or (`inherit=False`) the whole environment it gets."""
    return subprocess.run([sys.executable, "-m", "kbuild", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})} if inherit else env)


def invoke(*args: str, cwd: Path | None = None):
    """`kbuild ARGS` in this process (typer's CliRunner), in `cwd` when given; a BuildError comes
    back as the result's exception (the entry point turns it into a line in a real run)."""
    from typer.testing import CliRunner

    from kbuild.cli import app
    if cwd is None:
        return CliRunner().invoke(app, list(args))
    old = Path.cwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(app, list(args))
    finally:
        os.chdir(old)


# --- mutations of a project's build.toml, for tables of bad inputs ----------------------------


def edit(old: str, new: str):
    """A mutation: the first `old` in build.toml replaced by `new` (which must be there)."""
    def apply(project: Path) -> None:
        text = (project / "build.toml").read_text()
        assert old in text, old
        (project / "build.toml").write_text(text.replace(old, new, 1))
    return apply


def symlink_out(project: Path) -> None:
    """A mutation: a source listed in build.toml that is a link out of the project."""
    outside = project.parent / "outside.cpp"
    outside.write_text("int x;\n")
    os.symlink(outside, project / "csrc" / "evil.cpp")
    edit('src = ["csrc/img2gray_cpu.cpp"', 'src = ["csrc/evil.cpp", "csrc/img2gray_cpu.cpp"')(project)


CUDA_ENV = "torch214-cu130"


def cuda_env():
    """The torch 2.14.1 + CUDA 13.0 environment of pixi.toml, realised from PyPI in envs_folder()."""
    from kbuild.matrix import envs, matrix
    skip_unless_shipped_locks_fit(CUDA_ENV)
    return envs.realise(matrix.load(REPO).get(CUDA_ENV), envs_folder())


def this_python() -> str:
    return "%d.%d" % sys.version_info[:2]


def skip_unless_shipped_locks_fit(env: str) -> None:
    """Skips the test (or the module) where the committed lock of `env` is for another Python
    than this one (the GPU image's): kbuild rightly refuses to realise it there."""
    import pytest
    from kbuild.matrix import lockfile
    locked = lockfile.read(REPO / "locks" / "linux-64" / f"pylock.{env}.toml").python
    if locked != this_python():
        pytest.skip(f"the shipped lock of {env} is for Python {locked}, which kbuild (rightly) "
                    f"refuses on Python {this_python()}", allow_module_level=True)


def default_sigint() -> None:
    """Children of a background shell start with SIGINT ignored; tests need the default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def real_compiles_env() -> dict[str, str]:
    """Environment for a build whose compilers must really run (to be interrupted) while its
    configuration stays that of the run's other builds, so that the next build meets what it
    left: with ccache the launcher stays and bypasses its cache (CCACHE_DISABLE); otherwise no
    launcher (and the next build must then set KBUILD_COMPILER_CACHE=none too)."""
    from kbuild.stages.compile import compiler_launcher, is_ccache
    if is_ccache(compiler_launcher()):
        return {"CCACHE_DISABLE": "1"}
    return {"KBUILD_COMPILER_CACHE": "none"}


def compiler_pids(project: Path, source: str = "") -> list[int]:
    """Compiler processes (host or CUDA, and a compiler cache running one) working on files of
    `project` (and on `source`); not the shell that started them."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        cmd = b" ".join(argv).decode(errors="replace")
        if Path(argv[0].decode(errors="replace")).name in ("sh", "bash", "dash"):
            continue
        if str(project) in cmd and source in cmd and any(
                t in cmd for t in ("cc1plus", "cicc", "ptxas", "nvcc ", " -c ")):
            pids.append(int(proc.name))
    return pids


def wait_for(predicate, timeout: float = 600.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def complete_variants(build: Path) -> list[str]:
    """The entries of build/, each asserted to be a complete variant (`check`, minus loading)."""
    from kbuild.stages.check import check_variant
    if not build.exists():
        return []
    names = sorted(p.name for p in build.iterdir())
    for name in names:
        report = check_variant(build / name, load=False)
        assert report.ok, (name, report.problems)
    return names


def fake_torch(version: str = "2.13.0", cuda: str | None = None):
    """A TorchInstall as the planner sees it, without inspecting an interpreter (plan tests)."""
    from kbuild.stages.torch_install import TorchInstall
    return TorchInstall(python=sys.executable, python_version="3.11", python_include="/nonexistent",
                        torch_version=version, torch_root="/nonexistent", cuda=cuda, hip=None,
                        cxx11_abi=True, cxx_std=17, machine="x86_64", system="linux",
                        site_packages="/nonexistent")


def fake_toolkit(version: str, archs: list[str]):
    """A CudaToolkit of `version` whose nvcc supports `archs` (plan tests; no nvcc is run)."""
    from packaging.version import Version

    from kbuild.stages.toolchain import CudaToolkit
    toolkit = CudaToolkit(nvcc=Path("/nonexistent/nvcc"), version=Version(version),
                          root=Path("/nonexistent"))
    toolkit.__dict__["supported_archs"] = list(archs)
    return toolkit


# A minimal project "demo" written from build.toml text (manifest and plan unit tests).
MINI_GENERAL = """\
[general]
name = "demo"
version = 1
edition = 5
license = "apache-2.0"
backends = {backends}
"""


def make_project(root: Path, body: str, *, backends: str = '["cpu", "cuda"]',
                 files: tuple[str, ...] = ()) -> Path:
    (root / "torch-ext" / "demo").mkdir(parents=True)
    (root / "torch-ext" / "demo" / "__init__.py").write_text("")
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("// x\n")
    (root / "build.toml").write_text(MINI_GENERAL.format(backends=backends) + body)
    return root


TORCH = '[torch]\nsrc = ["torch-ext/torch_binding.cpp"]\n'
BINDING = ("torch-ext/torch_binding.cpp",)


def kernel(name: str, backend: str, *src: str, extra: str = "") -> str:
    return (f'\n[kernel.{name}]\nbackend = "{backend}"\ndepends = []\n'
            f'src = [{", ".join(repr(s).replace(chr(39), chr(34)) for s in src)}]\n{extra}')


# --- in-process stage tests (tools/tests/unit) ---

def fake_torch_at(root: Path):
    """A TorchInstall that names paths under `root` (for generating, not compiling)."""
    from kbuild.stages.torch_install import TorchInstall

    return TorchInstall(python="python", python_version="3.11", python_include=str(root / "py inc"),
                        torch_version="2.13.0", torch_root=str(root / "torch"), cuda=None, hip=None,
                        cxx11_abi=True, cxx_std=20, machine="x86_64", system="linux",
                        site_packages=str(root / "site"))


def make_probe_project(root: Path, kernels: dict | None = None, torch_extra: dict | None = None,
                 files: dict[str, str] | None = None, backends: tuple[str, ...] = ("cpu",)) -> Path:
    """A small [torch] project `probe` (CPU) with the given kernels, [torch] keys and files."""
    import tomli_w

    root.mkdir(parents=True, exist_ok=True)
    data = {"general": {"name": "probe", "version": 1, "edition": 5, "license": "apache-2.0",
                        "backends": list(backends)},
            "torch": {"src": ["torch-ext/torch_binding.cpp"], **(torch_extra or {})},
            "kernel": kernels or {}}
    (root / "build.toml").write_text(tomli_w.dumps(data))
    for rel, text in {"torch-ext/torch_binding.cpp": "", "torch-ext/probe/__init__.py": "",
                      **(files or {})}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def cpu_kernel(src: list[str], **extra) -> dict:
    return {"backend": "cpu", "depends": [], "src": src, **extra}


def plan_of(project: Path, name: str = "torch213-cxx11-cpu-x86_64-linux"):
    """The CPU plan of `project` against fake_torch (no interpreter inspected)."""
    from kbuild.core import manifest as manifest_mod
    from kbuild.core.backend import Backend
    from kbuild.core.variant import Variant
    from kbuild.stages.plan import VariantPlan

    manifest = manifest_mod.load(project)
    return VariantPlan(project=project.resolve(), manifest=manifest, variant=Variant.parse(name),
                       torch=fake_torch_at(project.parent), uid="abc1234", git=None,
                       kernels=manifest.kernels_for(Backend.CPU))


def envs_folder() -> Path:
    """Where tests realise PyPI environments: $KBUILD_ENVS_DIR (shared between checkouts) or
    the repository's .kbuild/envs."""
    shared = os.environ.get("KBUILD_ENVS_DIR")
    return Path(shared).resolve() if shared else REPO / ".kbuild" / "envs"



def pixi_before_2_15(folder: Path) -> Path:
    """Our pixi.toml as it was up to torch 2.14, written to `folder` (the tests of `matrix
    update` fabricate torch 2.14.2 and 2.15.0 releases)."""
    import re

    text = re.sub(r"\[feature\.pt215-[^\]]+\]\n[^\n]*\n\n", "", (REPO / "pixi.toml").read_text())
    text = "".join(ln for ln in text.splitlines(True) if not ln.startswith("torch215-"))
    assert "215" not in text
    (folder / "pixi.toml").write_text(text)
    return folder / "pixi.toml"
