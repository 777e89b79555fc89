"""`kbuild ci-workflow` (the workflow files) and the steps those workflows run through kbuild:
`ci-plan` (the jobs) and `ci-digest` (an artifact as its build job recorded it)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..core.errors import BuildError
from ..core.layout import MANIFEST
from .app import app, log, note, warn

RUNNER_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,99}")


@app.command("ci-workflow")
def ci_workflow(
    project: Annotated[Path, typer.Argument(
        help="Kernel project directory (with --monorepo: the repository's root).")] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Replace an existing workflow.")] = False,
    monorepo: Annotated[bool, typer.Option(
        "--monorepo", help="A workflow for a repository of kernel folders (each with build.toml), "
                           "written at its root: the kernel from a pull request's title or an "
                           "input, as kernels-community's.")] = False,
    org: Annotated[Optional[str], typer.Option(
        "--org", help="--monorepo: the Hub organisation kernels upload to (<org>/<kernel>); "
                      "default: the one most build.toml repo-ids name.")] = None,
    name: Annotated[str, typer.Option(
        "--name", help="--monorepo: the workflow file, .github/workflows/NAME (the `kernels` "
                       "loader trusts kernels-community's build.yaml by default).")] = "build.yaml",
) -> None:
    """Write the CI workflow: pull requests build one variant per backend, releases every
    variant; tests (`kbuild test --ci`) where each variant runs, CUDA on a self-hosted GPU
    runner of its architecture; a release is verified, signed and uploaded."""
    from ..workflows import writer
    root = project if project.is_absolute() else Path.cwd() / project
    if monorepo:
        made = writer.write_monorepo(root, org, name, force=force, warn=warn)
        kernels = made.kernels
        log(f"wrote {made.path} ({len(kernels)} kernels: {', '.join(kernels[:5])}"
            f"{', …' if len(kernels) > 5 else ''}; uploads to {made.org})")
        if made.unnamed:
            warn(f"the workflow builds no folder named {', '.join(made.unnamed)} (letters, digits, - "
                 "and _ only)")
        return
    target = writer.write_project(root, force=force, warn=warn)
    log(f"wrote {target}")
    top = writer.git_root(root)
    if top is not None and top != root.resolve():
        warn(f"GitHub reads workflows only at the repository's root ({top}), not in {root}: for "
             "a repository of kernels, run `kbuild ci-workflow --monorepo` at its root")


def _label(value: str, option: str) -> str:
    if value and not RUNNER_LABEL.fullmatch(value):
        raise BuildError(f"{option} {value!r} is not a runner label", key=option,
                         hint="one label: letters, digits, `-`, `_`, `.`, `:` and `/`")
    return value


@app.command("ci-plan")
def ci_plan(
    project: Annotated[Path, typer.Argument(help="Kernel project directory.")] = Path("."),
    mode: Annotated[str, typer.Option(
        "--mode", help="pr: one variant per backend; release: every variant.")] = "pr",
    gpu_runner: Annotated[str, typer.Option(
        "--gpu-runner", help="Label of the x86_64 GPU runner CUDA variants are tested on.")] = "linux-gpu",
    gpu_runner_aarch64: Annotated[str, typer.Option(
        "--gpu-runner-aarch64", help="Label of an aarch64 GPU runner; empty: aarch64 CUDA "
                                     "variants are not tested.")] = "",
    backends: Annotated[str, typer.Option(
        "--backends", help="Only these backends (comma-separated; empty: all).")] = "",
    repo_prefix: Annotated[Optional[str], typer.Option(
        "--repo-prefix", help="Upload to <prefix>/<kernel folder> (default: build.toml's "
                              "repo-id).")] = None,
    org: Annotated[Optional[str], typer.Option(
        "--org", help="With --repo-prefix: the organisation whose prefix opens a pull request "
                      "on a build.toml repo-id outside it.")] = None,
    branch: Annotated[str, typer.Option(
        "--branch", help="The Hub branch a release uploads to (empty: build.toml's, else "
                         "v<version>; then version 1 also goes to main).")] = "",
    concurrency: Annotated[Optional[Path], typer.Option(
        "--concurrency", help="build-concurrency.json: max-jobs and cores by kernel and "
                              "backend.")] = None,
) -> None:
    """The CI jobs of a kernel, as `key=value` lines for $GITHUB_OUTPUT: builds, tests,
    gpu_tests (JSON matrices), repo_id, create_pr, upload_main, torch. Notes go to stderr."""
    from ..matrix import ci, matrix
    if not (project / MANIFEST).is_file():
        raise BuildError(f"no {MANIFEST} in {project}", hint="run it in a kernel project")
    from ..workflows.writer import ORG
    for value, option in ((repo_prefix, "--repo-prefix"), (org, "--org")):
        if value is not None and not ORG.fullmatch(value):
            raise BuildError(f"{option} {value!r} is not a Hub organisation name", key=option,
                             hint="letters, digits, `-`, `_` and `.`")
    plan = ci.plan(project, matrix.load(project), ci.check_mode(mode),
                   gpu_runner=_label(gpu_runner, "--gpu-runner"),
                   gpu_runner_aarch64=_label(gpu_runner_aarch64, "--gpu-runner-aarch64"),
                   backends=ci.parse_backends(backends), repo_prefix=repo_prefix, org=org,
                   branch=branch or None, concurrency_file=concurrency)
    for line in plan.notes:
        note(line)
    for key, value in plan.outputs().items():
        typer.echo(f"{key}={value}")


@app.command("ci-digest")
def ci_digest(
    folder: Annotated[Path, typer.Argument(
        help="A variant folder (prints <variant>:<digest>); with --verify, the folder of "
             "downloaded variant-* artifacts.")],
    verify: Annotated[bool, typer.Option(
        "--verify", help="Check every variant-* folder against --recorded.")] = False,
    recorded: Annotated[str, typer.Option(
        "--recorded", help="The build job's outputs as JSON (toJSON(needs.build.outputs)).")] = "",
) -> None:
    """A variant's tree digest, recorded by its build job; with --verify, every downloaded
    artifact checked against those records (any missing, extra or different one: exit 2)."""
    from ..workflows import artifacts
    if not verify:
        typer.echo(artifacts.record(folder))
        return
    variants = artifacts.verify(folder, artifacts.recorded(recorded))
    log(f"{len(variants)} variant(s) as their build jobs recorded them: {', '.join(variants)}")
