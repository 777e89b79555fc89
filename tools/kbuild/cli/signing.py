"""`kbuild sign`, `kbuild verify` and `kbuild api-diff` (registered on the main app by cli.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from .app import app, log, warn
from .options import HubVersionOpt, ProjectArg, StagingOpt, TrustConfigOpt



@app.command()
def sign(
    project: ProjectArg = Path("."),
    build_dir: Annotated[Optional[Path], typer.Option(
        help="Build folder whose variants to sign; default: PROJECT/build.")] = None,
    trust_config: TrustConfigOpt = None,
    staging: StagingOpt = False,
) -> None:
    """Sign each variant's metadata.json with Sigstore (keyless, with the CI job's identity):
    build/<variant>/metadata.json.sigstore, as the kernels loader verifies it."""
    from ..core.layout import Layout
    from ..publish.sign import SigningOptions, sign_build
    sign_build(Layout.of(project, build_dir).build_dir,
               SigningOptions(trust_config=trust_config, staging=staging), log=log)


@app.command()
def verify(
    target: Annotated[Optional[Path], typer.Argument(
        help="A project, a build folder, one variant folder (or its metadata.json), or a file "
             "with <file>.sigstore beside it; default: .", show_default=False)] = None,
    repo_id: Annotated[Optional[str], typer.Option(
        "--repo-id", help="Verify a Hub kernel repo instead (needs --version).")] = None,
    version: HubVersionOpt = None,
    repository: Annotated[Optional[str], typer.Option(
        "--repository", help="The GitHub repository (OWNER/NAME) whose workflows sign; default: "
                             "[tool.kbuild.signing] repository in pixi.toml.")] = None,
    workflow: Annotated[Optional[list[str]], typer.Option(
        "--workflow", help="A trusted signing workflow, .github/workflows/FILE@REF or its full "
                           "URI (repeatable); default: [tool.kbuild.signing] workflows.")] = None,
    offline: Annotated[bool, typer.Option(
        "--offline", help="Verify against the trusted root sigstore has on this machine (first "
                          "the one its wheel embeds), without refreshing it.")] = False,
    trust_config: TrustConfigOpt = None,
    staging: StagingOpt = False,
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print the results as JSON instead: a list with one object per variant or "
                       "file (its result type, target, ok, fields and text).")] = False,
) -> None:
    """Verify signatures as the kernels loader does (kernels.verify.verify_variant), trusting
    your own repository and workflows: the signature over metadata.json, then every file
    against its digest. Exit 1 when one fails."""
    from ..publish.verify import Target, trusted_signers
    from ..publish.verify import verify as run_verify
    given = Target(target, repo_id, version)
    signers = trusted_signers(given.project, repository, list(workflow or []))
    verdicts = run_verify(given, signers, offline=offline, trust=trust_config, staging=staging)
    if json_out:
        typer.echo(json.dumps([v.to_json() for v in verdicts], indent=1))
    else:
        for v in verdicts:
            log(f"{'verified' if v.ok else 'FAILED'} {v.target}: {v.text}")
    if not all(v.ok for v in verdicts):
        raise typer.Exit(1)


@app.command("api-diff")
def api_diff(
    project: ProjectArg = Path("."),
    repo_id: Annotated[Optional[str], typer.Option(
        "--repo-id", help="Hub kernel repo; default: build.toml [general.hub] repo-id.")] = None,
    build_dir: Annotated[Optional[Path], typer.Option(
        help="Build folder; default: PROJECT/build.")] = None,
    python: Annotated[Optional[str], typer.Option(
        help="Interpreter that loads the variants; default: this one.")] = None,
) -> None:
    """Compare the public API of build/ (names and signatures, layers, op schemas, as a load
    reports them) with the API recorded on branch v<version> of the Hub repo (the branch's code
    is never run). Exit 1 on an incompatible change."""
    from ..publish.api import NOT_COMPARED
    from ..publish.api import api_diff as run_api_diff
    report = run_api_diff(project, repo_id=repo_id, build_dir=build_dir, python=python, warn=warn)
    for note in report.notes:
        log(note)
    for change in report.changes:
        log(change.line())
    if all(c.change == NOT_COMPARED for c in report.changes):
        log(f"no API change against {report.branch}")
    if report.breaking:
        raise typer.Exit(1)
