"""The options and arguments several commands share, each defined once (help text, callback)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..core.errors import BuildError
from .app import find_project


def _project_callback(value: Path) -> Path:
    return find_project(value)


# Every command that takes a kernel project uses this argument: it finds build.toml upwards.
ProjectArg = Annotated[Path, typer.Argument(
    help="Kernel project directory, or any folder inside it.", show_default=".",
    callback=_project_callback)]
# The matrix commands (build-all, envs, matrix update) take the folder as given.
MatrixProjectArg = Annotated[Path, typer.Argument(help="Kernel project directory.", show_default=".")]

# --- building: build, dev, generate, check, build-all ------------------------------------------
BackendOpt = Annotated[Optional[list[str]], typer.Option(
    "--backend", "-b", help="Backend to build (repeatable); default: the torch's own.")]
PythonOpt = Annotated[Optional[str], typer.Option(
    help="Interpreter whose torch to build against; default: this one if it has torch, else "
         "the active environment's ($VIRTUAL_ENV, $CONDA_PREFIX).")]
BuildDirOpt = Annotated[Optional[Path], typer.Option(help="Output folder; default: PROJECT/build.")]
JobsOpt = Annotated[Optional[int], typer.Option(help="Parallel compile jobs.")]


def named_env(value: str | None) -> str | None:
    """--env: a name, or left out; `--env ""` is refused, never taken for the default."""
    if value is not None and not value.strip():
        raise BuildError("--env is empty", hint="name an environment of pixi.toml "
                         "(`kbuild envs` lists them), or leave --env out for the default")
    return value


EnvOpt = Annotated[Optional[str], typer.Option(
    "--env", "-e", callback=named_env,
    help="Build in this environment of pixi.toml, realised from PyPI (from its lock).")]
CudaHomeOpt = Annotated[Optional[Path], typer.Option(
    "--cuda-home", help="CUDA toolkit to compile with (tried first); default: the one matching "
                        "torch's CUDA (CUDA_HOME, the environment's NVIDIA wheels, PATH).")]
DistOpt = Annotated[Optional[str], typer.Option(
    "--dist-scheduler", help="Distribute the compiles through this sccache-dist scheduler (URL; the "
    "client token in $KBUILD_DIST_TOKEN); same as KBUILD_DIST_SCHEDULER. Without it, a [dist] "
    "section of your sccache configuration is used. See docs/build-speed.md.")]
# kernel-builder's habits (its `build`, `build-and-copy`, `devshell`, `testshell` flags), one
# definition for every command that builds: build, build-all, dev.
VariantOpt = Annotated[Optional[str], typer.Option(
    "--variant", help="Build exactly this variant (a name as in build/, e.g. "
    "torch213-cxx11-cpu-x86_64-linux): one the target torch makes, else one of the matrix "
    "(pixi.toml's environments, else the builder's default ones), built in its environment as "
    "--env does. A name the project does not make is refused, listing those it makes.")]
PrintLogsOpt = Annotated[bool, typer.Option(
    "--print-build-logs", "-L", help="Stream the full output of CMake, Ninja and the compilers "
    "on stderr, each line as `<variant>> line` (nix's -L). Without it the output is summarised; "
    ".kbuild/<variant>/build.log keeps it either way.")]
MaxJobsOpt = Annotated[Optional[int], typer.Option(
    "--max-jobs", help="At most N variants built at once (nix's --max-jobs counts builds, "
    "each of up to --cores cores): build-all builds N environments at once (its --jobs); "
    "build and dev build their variants one after another, within any N.")]
CoresOpt = Annotated[Optional[int], typer.Option(
    "--cores", help="Cores one variant's build may use (nix's --cores, NIX_BUILD_CORES): the "
    "build divides them into Ninja jobs × nvcc threads per CUDA file (and nvcc's split, for "
    "local builds), as kernel-builder's Nix build divides its cores; the split is printed. "
    "0 or unset: all of this machine's. At most --max-jobs × --cores cores are busy.")]
CapsOpt = Annotated[Optional[str], typer.Option(
    "--cuda-capabilities", help="A local build: compile CUDA kernels only for these capabilities "
    "(comma-separated, e.g. 9.0) or `native` (the GPUs of this machine). Marked in metadata; "
    "check, upload and to-wheel refuse to publish it.")]

# --- the environment matrix: build-all, envs, lock, matrix update ------------------------------
MatrixOpt = Annotated[Optional[Path], typer.Option(
    "--matrix", help="pixi.toml with the environments; default: PROJECT/pixi.toml.")]
EnvsDirOpt = Annotated[Optional[Path], typer.Option(
    help="Where PyPI environments are cached; default: $KBUILD_ENVS_DIR or PROJECT/.kbuild/envs.")]
TorchIndexOpt = Annotated[bool, typer.Option(
    "--torch-index", help="Also use each environment's PyTorch wheel index (where reachable).")]

# --- publishing: upload, sign, verify, to-wheel ------------------------------------------------
TrustConfigOpt = Annotated[Optional[Path], typer.Option(
    "--trust-config", help="A Sigstore ClientTrustConfig JSON (a private Sigstore instance); "
                           "default: Sigstore's public instance.")]
StagingOpt = Annotated[bool, typer.Option(
    "--staging", help="Use Sigstore's staging instance (for trying the workflow out).")]
HubVersionOpt = Annotated[Optional[int], typer.Option(
    "--version", help="Kernel version on the Hub (branch v<N>).")]
