"""Commands of the build stages: generate, build, check, clean, update-build, dev."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand

from ..core.errors import BuildError
from ..core.layout import MANIFEST, Layout
from ..stages.toolchain import Toolkit
from .app import StepDisplay, app, err, keep_whole, note, out, table, warn
from .options import (BackendOpt, BuildDirOpt, CapsOpt, CoresOpt, CudaHomeOpt, DistOpt, EnvOpt, JobsOpt,
                      MaxJobsOpt, PrintLogsOpt, ProjectArg, PythonOpt, VariantOpt, named_env)

SLOW_STEP_S = 5.0  # name the slowest compile steps when one took at least this long


def target_python(python: str | None) -> str | None:
    """--python; else None (this interpreter) when it has torch; else the python of the active
    virtualenv or pixi/conda environment, so a `kbuild` installed as a tool builds for it."""
    if python:
        return python
    import importlib.util
    if importlib.util.find_spec("torch") is not None:
        return None
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        root = os.environ.get(var)
        candidate = Path(root) / "bin" / "python" if root else None
        if candidate and candidate.is_file() and Path(root).resolve() != Path(sys.prefix).resolve():
            return str(candidate)
    return None


@app.command()
def generate(project: ProjectArg = Path("."), backend: BackendOpt = None,
             python: PythonOpt = None) -> None:
    """Write the build files (CMake project, registration.h, _ops.py) from templates."""
    from ..stages import generate as gen
    from ..stages import pipeline
    for plan in pipeline.plans(project, backends=backend, python=target_python(python), warn=warn):
        out.print(f"{plan.name}: {gen.generate(plan)}")


def run_build(project: Path, backend: list[str] | None, python: str | None,
              build_dir: Path | None = None, jobs: int | None = None,
              toolkit: Toolkit = Toolkit(), local_capabilities: str | None = None, *,
              variant: str | None = None, cores: int | None = None,
              print_build_logs: bool = False, dist_scheduler: str | None = None) -> list:
    """Builds with progress on stderr and one result line per variant on stdout.
    `local_capabilities`: --cuda-capabilities as given (a list, or `native`)."""
    from ..stages import pipeline, torch_install
    python = target_python(python)
    local_capabilities = (torch_install.local_capabilities(local_capabilities, python)
                          if local_capabilities else None)  # the option's text, as a list
    with StepDisplay() as display:
        results = pipeline.build(project, backends=backend, python=python, toolkit=toolkit,
                                 build_dir=build_dir, jobs=jobs, warn=warn, note=note,
                                 on_step=display, local_capabilities=local_capabilities,
                                 variant=variant, cores=cores, dist_scheduler=dist_scheduler,
                                 on_output=display.output if print_build_logs else None)
    for r in results:
        state = "built" if r.changed else "up to date"
        out.print(f"[green]{state}[/] {r.variant} ({r.kernel_id}) in {r.seconds:.1f}s -> {r.path}",
                  highlight=False, soft_wrap=True)
        if r.cache:
            err.print(r.cache, highlight=False, markup=False, soft_wrap=True)
        if r.pch:
            err.print(r.pch, highlight=False, markup=False, soft_wrap=True)
        if r.dist:
            err.print(r.dist, highlight=False, markup=False, soft_wrap=True)
        if r.slowest and r.slowest[0][1] >= SLOW_STEP_S:
            err.print("slowest steps: " + ", ".join(f"{src} {t:.1f}s" for src, t in r.slowest),
                      highlight=False, markup=False, soft_wrap=True)
    return results


def check_habits(max_jobs: int | None, cores: int | None) -> None:
    """--max-jobs and --cores, refused at once when they are no count."""
    from ..stages.compile import check_cores, check_jobs
    check_jobs(max_jobs, "--max-jobs")
    check_cores(cores)


def resolve_variant(project: Path, variant: str | None, backend: list[str] | None,
                    env: str | None, python: str | None) -> tuple[list[str] | None, str | None]:
    """--variant NAME as the backend to build and the environment to build it in (--env's, a
    matrix environment's, or None: the target torch). Nothing is realised before it is known."""
    if variant is None:
        return backend, env
    if backend:
        raise BuildError("--variant and --backend exclude each other",
                         hint="the variant's name says its backend: give only --variant")
    from ..matrix.choose import choose
    choice = choose(project, variant, python=target_python(python),
                    explicit_python=python is not None, env=env)
    return [choice.backend], choice.env or env


@app.command()
def build(project: ProjectArg = Path("."), backend: BackendOpt = None, python: PythonOpt = None,
          build_dir: BuildDirOpt = None, env: EnvOpt = None, cuda_home: CudaHomeOpt = None,
          jobs: JobsOpt = None,
          local_capabilities: CapsOpt = None, dist_scheduler: DistOpt = None,
          cutlass_substitute: Annotated[bool, typer.Option(
              "--cutlass-substitute", help="For a CUTLASS version with no release here, use the "
              "nearest newer one (warned, recorded); same as KBUILD_CUTLASS_SUBSTITUTE=1.")] = False,
          variant: VariantOpt = None, print_build_logs: PrintLogsOpt = False,
          max_jobs: MaxJobsOpt = None, cores: CoresOpt = None) -> None:
    """Compile for the torch of PYTHON (or of --env), check that it loads, and assemble
    build/<variant>/. kernel-builder's `build` and `build-and-copy`: the same."""
    from ..stages.compile import check_jobs, dist
    check_jobs(jobs)  # before an environment is realised
    check_habits(max_jobs, cores)
    dist.check_scheduler(dist_scheduler)
    if cutlass_substitute:  # read by stages/generate/cutlass/
        os.environ["KBUILD_CUTLASS_SUBSTITUTE"] = "1"
    backend, env = resolve_variant(project, variant, backend, env, python)
    python, env_cuda = realised_python(project, env, python)
    run_build(project, backend, python, build_dir, jobs, Toolkit(cuda_home or env_cuda),
              local_capabilities, variant=variant, cores=cores, print_build_logs=print_build_logs,
              dist_scheduler=dist_scheduler)


def explain_load_failure(variant: Path, python: str | None) -> str | None:
    """torch's own message for a variant whose load crashed the check's probe."""
    from ..stages.check import loadcheck
    from ..stages.torch_install import read_torch_install
    sos = sorted(variant.glob("*.so"))
    if len(sos) != 1:
        return None
    try:
        torch = read_torch_install(python)
    except BuildError:
        return None
    return loadcheck.probe(sos[0], torch.python, torch.lib_dir)


def note_older_edition(project: Path) -> None:
    """One note when build.toml is of an older edition (builds read edition 4 without one)."""
    from ..core import editions, manifest
    try:
        edition = editions.detect_edition(manifest.read_raw(project))
    except BuildError:  # no manifest or an unreadable one: check looks at build/ only
        return
    said = editions.older_edition_note(edition)
    if said:
        note(f"note: {said}")


@app.command()
def check(project: ProjectArg = Path("."), build_dir: BuildDirOpt = None,
          python: PythonOpt = None,
          load: Annotated[bool, typer.Option(help="Also load each variant with kernels.")] = True
          ) -> None:
    """Verify build/: metadata, digest, layout, ABI (manylinux_2_28 + abi3) and loading; and
    that CARD.md renders with a valid front matter."""
    from ..publish.card import check_card
    from ..core.built import variant_dirs
    from ..stages.check import check_variant
    card = check_card(project)  # a broken card: one error line, before the variants
    python = target_python(python)
    note_older_edition(project)
    root = Layout.of(project, build_dir).build_dir
    if not root.is_dir() or not variant_dirs(root):
        raise BuildError("no variants to check", file=root, hint="run `kbuild build` first")
    results = table("variant", "result", "details")
    failed = 0
    for variant in variant_dirs(root):
        report = check_variant(variant, python=python, load=load)
        failed += not report.ok
        problems = [str(p) for p in report.problems]
        for i, p in enumerate(report.problems):
            if getattr(p, "code", "") == "load.failed" and "probe crashed" in p:
                problems[i] = f"load: {explain_load_failure(variant, python) or p}"
        status = "[green]ok[/]" if report.ok else "[red]FAILED[/]"
        results.add_row(variant.name, status, "\n".join(problems + report.notes))
    keep_whole(results, 0, out)
    out.print(results)
    if card:
        note(card)
    if failed:
        raise typer.Exit(1)


@app.command()
def clean(project: ProjectArg = Path(".")) -> None:
    """Remove generated files (.kbuild/, the compile_commands.json a build wrote) and built
    variants (build/<variant>/), nothing else."""
    from ..stages.pipeline import clean as remove_generated
    for path in remove_generated(project, warn):
        out.print(f"removed {path}")


@app.command("update-build")
def update_build(project: ProjectArg = Path("."),
                 dry_run: Annotated[bool, typer.Option(help="Print, don't write.")] = False) -> None:
    """Rewrite an older build.toml as edition 5, changing only what the upgrade needs: comments,
    order and layout of everything else stay (an edition 4 file gains one line)."""
    from ..core.editions import CURRENT_EDITION
    from ..core.manifest.rewrite import rewrite
    new = rewrite(project)
    if new is None:
        out.print(f"{project.resolve() / MANIFEST} is already edition {CURRENT_EDITION}")
        return
    if dry_run:
        out.print(new.text, highlight=False, markup=False, end="")
        return
    new.write()
    for line in new.notes:
        out.print(f"- {line}", highlight=False, markup=False)
    out.print(f"rewrote {new.path} (only the lines above changed)", highlight=False, markup=False)


# --- dev: build, then the project's tests, with tracebacks pointing at torch-ext/ ---------------

class PassThroughCommand(TyperCommand):
    """Everything after `--` goes to pytest (ctx.meta["pytest_args"]), never to our arguments."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if "--" in args:
            i = args.index("--")
            ctx.meta["pytest_args"] = args[i + 1:]
            args = args[:i]
        return super().parse_args(ctx, args)


def realised_python(project: Path, env: str | None, python: str | None, *,
                    compiler: bool = True) -> tuple[str | None, Path | None]:
    """--env: the environment's interpreter (and CUDA root), realised from its lock; else
    --python (or the active environment's)."""
    if named_env(env) is None:
        return target_python(python), None
    if python:
        raise BuildError("--env and --python exclude each other")
    from ..matrix.envs import realise_env
    real = realise_env(project, env, log=lambda m: note(f"{env}: {m}"), compiler=compiler)
    return str(real.python), real.cuda_home


def test_tools(project: Path, tested, python: str | None, label: str) -> list[Path]:
    """The tests' requirements (pytest, numpy, python-depends, flake.nix pythonCheckInputs,
    tests/requirements.txt) that the target interpreter lacks, installed beside its environment
    (never into it); their folders, for PYTHONPATH."""
    from ..matrix.envs import envs_dir
    from ..matrix.testtools import test_tools as install
    from ..stages.devtest import testdeps
    needs = testdeps.test_needs(project, tested.variants, warn)
    return install(python or sys.executable, envs_dir(project), [n.requirement for n in needs],
                   log=lambda m: note(f"{label}: {m}"))


def run_project_tests(project: Path, tested, python: str | None, tools: list[Path],
                      args: list[str]) -> None:
    """The tests, after every check and link (nothing is said to load before it can), and
    pytest's exit status as ours; one it does not explain itself is said in words. `--ci`: no
    test selected (exit 5) is a success, as in upstream's ci-test."""
    from ..stages import devtest
    env = devtest.loading_env(tested, tools=tools)
    note(tested.describe())
    code = devtest.run_tests(project, python, args, write=write_through, color=out.is_terminal,
                             tested=tested, env=env)
    words = devtest.status_words(code, args, ci=tested.ci)
    if words:
        err.print(words, highlight=False, markup=False, soft_wrap=True)
    raise typer.Exit(0 if tested.ci and code == devtest.NO_TESTS_COLLECTED else code)


def write_through(text: str) -> None:  # pytest's own output, colours and all
    sys.stdout.write(text)
    sys.stdout.flush()


@app.command(cls=PassThroughCommand)
def dev(ctx: typer.Context, project: ProjectArg = Path("."), backend: BackendOpt = None,
        python: PythonOpt = None, env: EnvOpt = None, cuda_home: CudaHomeOpt = None,
        jobs: JobsOpt = None,
        local_capabilities: CapsOpt = None, variant: VariantOpt = None,
        print_build_logs: PrintLogsOpt = False, max_jobs: MaxJobsOpt = None,
        cores: CoresOpt = None) -> None:
    """The fast loop: rebuild what changed, then run the project's tests/ against that build.

    The tests load the build just made however they load the kernel: `get_kernel(REPO_ID, ...)`
    of the manifest's general.hub.repo-id resolves to it (LOCAL_KERNELS), and `import MODULE`
    imports it, and nothing else in build/ can be picked instead. What the tests need and the
    interpreter lacks (pytest, numpy, python-depends, flake.nix pythonCheckInputs,
    tests/requirements.txt) is installed beside its environment, never into it. Arguments after
    `--` go to pytest: `kbuild dev -- -k name -x`. Tracebacks through the built package point
    at its torch-ext/ sources."""
    from ..stages import devtest
    from ..stages.compile import check_jobs
    check_jobs(jobs)
    check_habits(max_jobs, cores)
    devtest.require_tests(project)
    devtest.check_local_kernels(project)  # before the build, not after it
    backend, env = resolve_variant(project, variant, backend, env, python)
    python, env_cuda = realised_python(project, env, python)
    results = run_build(project, backend, python, jobs=jobs, toolkit=Toolkit(cuda_home or env_cuda),
                        local_capabilities=local_capabilities, variant=variant, cores=cores,
                        print_build_logs=print_build_logs)
    if not results:
        raise BuildError("nothing was built to test", file=project / MANIFEST,
                         key="general.backends", hint="list a backend this torch can build")
    tested = devtest.target(project, Layout.of(project).build_dir, own_backend_first(results, python))
    tools = test_tools(project, tested, python, env or "tests")
    run_project_tests(project, tested, python, tools, ctx.meta.get("pytest_args", []))


def own_backend_first(results: list, python: str | None) -> list[Path]:
    """The built variants, the one of torch's own backend (CUDA for a CUDA torch) first: the one
    `import MODULE` gives."""
    from ..core.variant import Variant
    from ..stages.torch_install import read_torch_install
    if len(results) < 2:
        return [r.path for r in results]
    cuda = read_torch_install(python).cuda is not None
    return [r.path for r in sorted(results, key=lambda r: (
        Variant.parse(r.variant).compute == "cpu") == cuda)]


@app.command("test", cls=PassThroughCommand)
def test_(ctx: typer.Context, project: ProjectArg = Path("."), build_dir: Annotated[Optional[Path], typer.Option(
              help="The build to test: a folder of variants (default: PROJECT/build), or one "
                   "variant's folder.")] = None,
          python: PythonOpt = None, env: Annotated[Optional[str], typer.Option(
              "--env", "-e", callback=named_env, help="Test in this environment of pixi.toml, "
              "realised from PyPI (from its lock), without its compiler.")] = None,
          ci: Annotated[bool, typer.Option(
              "--ci", help="As kernel-builder's `ci-test`: pass without tests/, run only the "
                           "tests marked kernels_ci (`-m kernels_ci -p no:cacheprovider`) against "
                           "the best variant for this machine, and count \"no test selected\" "
                           "(pytest exit 5) as success.")] = False) -> None:
    """Run the project's tests/ against a build that exists, without compiling anything.

    The variant is the one the `kernels` loader of PYTHON (or --env) would load from BUILD_DIR;
    the tests load it as `kbuild dev` sets up (LOCAL_KERNELS and `import MODULE`). What the
    tests need and the interpreter lacks (pytest, numpy, python-depends, flake.nix
    pythonCheckInputs, tests/requirements.txt) is installed beside its environment, never into
    it. Runs where no compiler is installed (a GPU runner that receives the built variants).
    Arguments after `--` go to pytest: `kbuild test -- -k name`. Exits with pytest's status."""
    from ..stages import devtest
    if ci and not devtest.has_tests(project):
        note(f"no tests/ folder in {project.resolve()}: nothing to test, which passes (as "
             "kernel-builder's ci-test)")
        return
    devtest.require_tests(project)
    devtest.check_local_kernels(project)
    python, _ = realised_python(project, env, python, compiler=False)
    tested = devtest.select_variants(project, Layout.of(project, build_dir).build_dir, python, ci=ci)
    tools = test_tools(project, tested, python, env or "tests")
    run_project_tests(project, tested, python, tools, ctx.meta.get("pytest_args", []))
