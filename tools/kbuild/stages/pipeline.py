"""The stages in order: manifest → plan → environment → generate → compile → assemble, and
`clean`: what builds wrote, removed."""

from __future__ import annotations

import re
import shutil
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from ..core import manifest as manifest_mod
from ..core.backend import Backend
from ..core.built import is_variant_dir
from ..core.errors import BuildError
from ..core.layout import Layout
from ..core.locking import locked
from ..core.removal import remove_tree
from . import frameworks
from .check import pyops
from .assemble import install, python_files, stage
from .check import verify_build
from .compile import compile_variant, split
from .compile.compile_commands import export_compile_commands, ours
from .generate import generate
from .check.loadcheck import Loader, check_loads, loaded_before
from .plan import VariantPlan, plan_noarch, plan_variant
from .toolchain import Toolkit
from .torch_install import TorchInstall, read_torch_install

Log = Callable[[str], None]


@dataclass(frozen=True)
class BuildResult:
    variant: str
    path: Path
    kernel_id: str
    changed: bool
    seconds: float
    slowest: tuple[tuple[str, float], ...] = ()  # this run's longest compile steps (source, s)
    cache: str = ""  # this run's compiler-cache hits and misses, when a cache is in use
    pch: str = ""  # what the binding's precompiled header did (stages/compile/pch.py)
    dist: str = ""  # the compiles build servers ran, when distributed (stages/compile/dist.py)


@dataclass(frozen=True)
class Step:
    """Where a build is, for progress displays. `stage`: environment, generate, configure,
    compile, assemble, load (or loaded: this .so loaded before) or install; during `compile`,
    `done`/`total` are Ninja's counts and `detail` the file of the step Ninja finished last."""
    variant: str
    stage: str
    detail: str = ""
    done: int | None = None
    total: int | None = None


OnStep = Callable[[Step], None]
OnOutput = Callable[[str, str], None]  # (variant, a line CMake, Ninja or a compiler printed)
NINJA_LINE = re.compile(r"^\[(\d+)/(\d+)\] (.*)$")
NINJA_OBJECT = re.compile(r"^Building \w+ object CMakeFiles/[^/]+\.dir/(.+)\.o$")


def ninja_file(description: str, project: Path) -> str:
    """`Building CXX object CMakeFiles/t.dir/<abs path>.o` → the project-relative source."""
    m = NINJA_OBJECT.match(description)
    if not m:
        return description.replace("Linking CXX shared module", "linking").strip()
    path = "/" + m.group(1)
    root = str(project).rstrip("/") + "/"
    return path[len(root):] if path.startswith(root) else m.group(1)


def step_source(output: str, project: Path) -> str:
    """A Ninja output (`CMakeFiles/t.dir/<abs path>.o`, the module) → what a user recognises."""
    m = re.match(r"^CMakeFiles/[^/]+\.dir/(.+)\.o$", output)
    if not m:
        return output
    path, root = "/" + m.group(1), str(project).rstrip("/") + "/"
    return path[len(root):] if path.startswith(root) else m.group(1)


def _compile_progress(plan: VariantPlan, on_step: OnStep, detail: str = "",
                      on_output: OnOutput | None = None):
    def progress(phase: str, line: str) -> None:
        if line and on_output:
            on_output(plan.name, line)
        if not line:
            on_step(Step(plan.name, "configure", "") if phase == "configure"
                    else Step(plan.name, "compile", detail))
            return
        m = NINJA_LINE.match(line)
        if phase == "build" and m:
            on_step(Step(plan.name, "compile", ninja_file(m.group(3), plan.project),
                         int(m.group(1)), int(m.group(2))))
    return progress


def default_backends(manifest: manifest_mod.Manifest, torch: TorchInstall | None) -> list[Backend]:
    """A CUDA torch builds the `cuda` variant, a CPU torch the `cpu` one (if listed)."""
    if manifest.is_noarch:
        return list(manifest.general.backends)
    want = Backend.CUDA if torch and torch.cuda else Backend.CPU
    return [want] if want in manifest.general.backends else [manifest.general.backends[0]]


def build_plan(plan: VariantPlan, build_dir: Path, jobs: int | None = None, *,
               on_step: OnStep | None = None, verify: bool = True, cores: int | None = None,
               on_output: OnOutput | None = None) -> BuildResult:
    """Builds one variant. `verify`: load a new extension before installing it (loadcheck).
    `cores`: what its compile may use (compile.split); `on_output`: every line of the compile's
    output, as it comes (--print-build-logs)."""
    start = time.monotonic()
    step = on_step or (lambda s: None)
    pyops.check_package(python_files(plan), plan.project)
    # Two builds of one variant (two terminals, parallel tests) take turns on its work dir.
    with locked(Layout.of(plan.project).variant_work(plan.name).with_suffix(".lock")):
        step(Step(plan.name, "generate"))
        work = generate(plan)
        so, slowest, cache, header, remote, nvcc_split = None, (), "", "", "", 1
        # torch's libraries load in the target interpreter while the compiler runs
        with Loader(plan.torch.python, plan.torch.lib_dir) if plan.compiled and verify \
                else nullcontext() as loader:
            if plan.compiled:
                how = split(plan, jobs, cores=cores)
                compiled = compile_variant(plan, work, jobs, _compile_progress(
                    plan, step, f"({how})", on_output) if on_step or on_output else None, cores)
                so, slowest = compiled.so, tuple((step_source(o, plan.project), t)
                                                 for o, t in compiled.slowest)
                cache = str(compiled.cache) if compiled.cache else ""
                header = str(compiled.pch) if compiled.pch else ""
                remote = str(compiled.dist) if compiled.dist else ""
                nvcc_split = compiled.nvcc_split
                verify_build(plan, so)
            step(Step(plan.name, "assemble"))
            staged = stage(plan, work, so, Layout.of(plan.project, build_dir).staging, nvcc_split)
            try:
                if so is not None and verify:
                    if loaded_before(plan, staged / so.name, work):
                        step(Step(plan.name, "loaded"))
                    else:
                        step(Step(plan.name, "load"))
                        check_loads(plan, staged / so.name, work, loader)
                step(Step(plan.name, "install"))
                changed = install(staged, build_dir, plan.name)
            finally:
                if staged.exists():
                    shutil.rmtree(staged, ignore_errors=True)
    return BuildResult(plan.name, build_dir / plan.name, plan.kernel_id, changed,
                       time.monotonic() - start, slowest, cache, header, remote)


def plans(project: Path, *, backends: list[str] | None = None, python: str | None = None,
          toolkit: Toolkit = Toolkit(), warn: Log | None = None, on_step: OnStep | None = None,
          local_capabilities: list[str] | None = None,
          dist_scheduler: str | None = None) -> list[VariantPlan]:
    project = project.resolve()
    manifest = manifest_mod.load(project, warn=warn)
    frameworks.refuse_unbuildable(manifest, project)
    if manifest.is_noarch:
        made = [plan_noarch(project, manifest, b) for b in backends or manifest.general.backends]
    else:
        if on_step:
            on_step(Step("", "environment", f"reading the torch of {python or 'this interpreter'}"))
        torch = read_torch_install(python, cache_file=Layout.of(project).torch_cache)
        made = [plan_variant(project, manifest, torch, b, toolkit=toolkit,
                             local_capabilities=local_capabilities)
                for b in backends or default_backends(manifest, torch)]
    for p in made if local_capabilities and warn else []:  # said once per variant
        warn(f"{p.name}: a local build for CUDA capabilities {', '.join(local_capabilities)} "
             "only: not publishable" if p.local_capabilities else
             f"{p.name}: --cuda-capabilities does not apply to a variant without CUDA code; "
             "built as usual (publishable)")
    for line in (n for p in made for n in p.capability_notes):
        (warn or (lambda _: None))(line)  # kernels a build narrowed or compiles only to link
    return [replace(p, dist_scheduler=dist_scheduler) for p in made] if dist_scheduler else made


def build(project: Path, *, backends: list[str] | None = None, python: str | None = None,
          toolkit: Toolkit = Toolkit(), build_dir: Path | None = None, jobs: int | None = None,
          warn: Log | None = None, note: Log | None = None, on_step: OnStep | None = None,
          verify: bool = True, local_capabilities: list[str] | None = None,
          variant: str | None = None, cores: int | None = None,
          on_output: OnOutput | None = None, dist_scheduler: str | None = None) -> list[BuildResult]:
    """Plans and builds the variants of `backends` (the torch's own by default), one after
    another; `variant`: only that one (refused, before anything compiles, when the plans make
    no such variant). `dist_scheduler`: where the compiles go (--dist-scheduler)."""
    build_dir = Layout.of(project, build_dir).build_dir
    made = plans(project, backends=backends, python=python, toolkit=toolkit, warn=warn,
                 on_step=on_step, local_capabilities=local_capabilities,
                 dist_scheduler=dist_scheduler)
    if variant is not None:
        if variant not in [p.name for p in made]:
            raise BuildError(f"this build makes no variant {variant!r}",
                             file=Layout.of(project).manifest, key="general.backends",
                             hint="it makes " + ", ".join(p.name for p in made))
        made = [p for p in made if p.name == variant]
    results = [build_plan(p, build_dir, jobs, on_step=on_step, verify=verify, cores=cores,
                          on_output=on_output) for p in made]
    export_compile_commands(project, [Layout.of(p.project).variant_work(p.name)
                                      for p in made if p.compiled], note)
    return results


def clean(project: Path, warn: Log) -> list[Path]:
    """`kbuild clean`: removes the work folder (.kbuild/), the compile_commands.json a build wrote
    (a user's own stays) and the built variants (build/<variant>/), nothing else; what it removed.
    A link is never followed (it may lead out of the project): it is named through `warn`."""
    layout = Layout.of(project)
    removed = []
    commands = layout.compile_commands
    if commands.is_file() and ours(commands, layout.compile_commands_mark):  # a user's stays
        commands.unlink()
        removed.append(commands)

    def unfollowed(path: Path) -> bool:  # a link may lead out of the project: never followed
        if path.is_symlink():
            warn(f"{path} is a symlink (to {path.resolve()}); not following it, left as it is")
        return path.is_symlink()

    work = layout.work
    if not unfollowed(work) and work.is_dir() and remove_tree(work, warn):
        removed.append(work)
    build_root = layout.build_dir
    if not unfollowed(build_root) and build_root.is_dir():
        for variant in sorted(build_root.iterdir()):
            if not unfollowed(variant) and is_variant_dir(variant, built=True):
                if remove_tree(variant, warn):
                    removed.append(variant)
        if not any(build_root.iterdir()):
            build_root.rmdir()
    return removed
