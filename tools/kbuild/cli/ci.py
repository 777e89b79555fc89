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
        if (root / MANIFEST).is_file():
            raise BuildError(f"{root} is a kernel project; --monorepo writes the workflow of a "
                             "repository of kernel folders", file=root / MANIFEST,
                             hint="run it at the repository's root, or leave out --monorepo")
        kernels = writer.kernel_folders(root)
        if not kernels:
            raise BuildError(f"no kernel folder in {root} (a folder with a {MANIFEST})",
                             hint="run it at the root of a repository of kernel folders")
        chosen = org or writer.default_org(root, kernels)
        if chosen is None:
            warn(f"no --org and no build.toml names a repo-id: uploads go to {writer.PLACEHOLDER_ORG}"
                 "/<kernel>; edit repo_prefix in the workflow, or pass --org")
        rel = writer.workflow_file(name)
        text = writer.monorepo_workflow(chosen or writer.PLACEHOLDER_ORG, warn)
        target = writer.write(root, rel, text, force=force)
        log(f"wrote {target} ({len(kernels)} kernels: {', '.join(kernels[:5])}"
            f"{', …' if len(kernels) > 5 else ''}; uploads to {chosen or writer.PLACEHOLDER_ORG})")
        unnamed = [k for k in kernels if not writer.KERNEL_FOLDER.fullmatch(k)]
        if unnamed:
            warn(f"the workflow builds no folder named {', '.join(unnamed)} (letters, digits, - "
                 "and _ only)")
        return
    if not (root / MANIFEST).is_file():
        raise BuildError(f"no {MANIFEST} in {root}", hint="run it in a kernel project (or "
                         "--monorepo at the root of a repository of kernel folders)")
    target = writer.write(root, writer.PROJECT_WORKFLOW, writer.project_workflow(warn), force=force)
    log(f"wrote {target}")
    top = _git_root(root)
    if top is not None and top != root.resolve():
        warn(f"GitHub reads workflows only at the repository's root ({top}), not in {root}: for "
             "a repository of kernels, run `kbuild ci-workflow --monorepo` at its root")


def _git_root(path: Path) -> Path | None:
    from ..core.runner import capture
    proc = capture(["git", "-C", str(path), "rev-parse", "--show-toplevel"])
    return Path(proc.stdout.strip()).resolve() if proc.returncode == 0 and proc.stdout.strip() else None


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
