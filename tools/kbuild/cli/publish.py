"""`kbuild upload` and `kbuild to-wheel` (registered on the main app by cli.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .app import app, log, note, warn
from .options import HubVersionOpt, ProjectArg, StagingOpt, TrustConfigOpt


@app.command()
def upload(
    project: ProjectArg = Path("."),
    repo_id: Annotated[Optional[str], typer.Option(
        "--repo-id", help="Hub kernel repo (org/name); default: build.toml [general.hub] repo-id.")] = None,
    build_dir: Annotated[Optional[Path], typer.Option(
        help="Build folder to upload; default: PROJECT/build.")] = None,
    tag: Annotated[Optional[str], typer.Option(
        help="Also tag the uploaded commit with a full release tag, e.g. v1.2.3.")] = None,
    create_pr: Annotated[bool, typer.Option(
        "--create-pr", help="Open a pull request instead of pushing to the branch.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print what would be added, changed and deleted; write nothing.")] = False,
    branch: Annotated[Optional[str], typer.Option(
        "--branch", help="Upload to this branch (e.g. main, for version-1 kernels as "
        "kernels-community's release job does); default: build.toml [general.hub] branch, "
        "else v<version>.")] = None,
    output_json: Annotated[Optional[Path], typer.Option(
        "--output-json", help="Write a JSON summary here: status, repo_id, branch, commit, url, "
        "pull_requests [{branch, url}] (upstream's fields) and the files.")] = None,
    allow_dirty: Annotated[bool, typer.Option(
        "--allow-dirty", help="Upload even if the project or a variant has uncommitted changes.")] = False,
    private: Annotated[bool, typer.Option(
        "--private", help="Create the repo as private (when it does not exist yet).")] = False,
    sign: Annotated[bool, typer.Option(
        "--sign", help="Sign each variant (Sigstore, keyless: in CI) after the checks, before "
                       "the first write.")] = False,
    require_signature: Annotated[bool, typer.Option(
        "--require-signature", help="Refuse variants whose metadata.json is not signed as it "
                                    "is now.")] = False,
    trust_config: TrustConfigOpt = None,
    staging: StagingOpt = False,
    allow_api_change: Annotated[bool, typer.Option(
        "--allow-api-change", help="Upload even if a public name or op of this version is "
                                   "removed or changed incompatibly.")] = False,
    repo_type: Annotated[str, typer.Option(
        "--repo-type", help="Hub repository type, as kernel-builder takes it: kernel (the "
                            "only one kbuild uploads to).")] = "kernel",
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="No progress output: only warnings, errors and the result line "
                              "(`Kernel uploaded: URL`, `Pull request created: URL`, "
                              "`No changes to upload.`).")] = False,
) -> None:
    """Upload the checked variants of build/ to branch v<version> of a Hub kernel repo, and
    the card (CARD.md rendered, or a generated one) as README.md on main."""
    from ..publish.sign import SigningOptions
    from ..publish.upload import UploadOptions, upload
    options = UploadOptions(repo_id=repo_id, build_dir=build_dir, tag=tag, create_pr=create_pr,
                            dry_run=dry_run, allow_dirty=allow_dirty, private=private,
                            output_json=output_json, branch=branch, sign=sign,
                            require_signature=require_signature,
                            signing=SigningOptions(trust_config=trust_config, staging=staging),
                            allow_api_change=allow_api_change, repo_type=repo_type,
                            quiet=quiet)
    upload(project, options, log=log, warn=warn, note=note)


@app.command()
def card(
    project: ProjectArg = Path("."),
    output: Annotated[Optional[Path], typer.Option(
        "--output", "-o", help="Write the card to this file instead of printing it.")] = None,
    build_dir: Annotated[Optional[Path], typer.Option(
        help="Build folder a generated card lists the variants of; default: PROJECT/build.")] = None,
) -> None:
    """Print the card `kbuild upload` sends as README.md: CARD.md rendered as kernel-builder's
    fill-card renders it (its front matter checked), or the card generated without one."""
    import sys

    from ..publish.card import project_card
    text = project_card(project, build_dir)
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    from ..publish.card import write_card
    write_card(output, text)
    note(f"wrote {output}")

@app.command("to-wheel")
def to_wheel(
    source: Annotated[Optional[Path], typer.Argument(
        help="A build folder, a variant folder or a kernel project; default: .")] = None,
    repo_id: Annotated[Optional[str], typer.Option(
        "--repo-id", help="Make wheels of a Hub kernel repo instead (needs --version).")] = None,
    version: HubVersionOpt = None,
    out: Annotated[Path, typer.Option(help="Folder for the wheels.")] = Path("dist"),
) -> None:
    """Package each variant as a wheel (abi3 + manylinux_2_28 and torch==X.Y.* when compiled)."""
    from ..publish import wheel
    if repo_id is not None and source is not None:
        from ..core.errors import BuildError
        raise BuildError("give either SOURCE or --repo-id, not both")
    wheel.to_wheels(source, out=out, repo_id=repo_id, version=version, log=log, warn=warn)
