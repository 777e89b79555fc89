"""Stage: publish — upload a checked build folder to a Hub kernel repo (`kbuild upload`).

What lands where (the reference uploader's layout):
- `build/<variant>/…` and `benchmarks/benchmark*.py` on branch `v<version>` (created from
  `main` when missing), in ONE commit per upload: every add plus a delete of every remote file
  under an uploaded variant's folder that the local variant no longer has (`sync.py`).
- With `--tag`, the release tag on that commit, then `README.md` on `main`, from `CARD.md` or a
  generated card (`card.py`), in a separate commit.

Everything that can be known to fail is checked before the first write: the variants, the
endpoint, the token (valid, not read-only), the signatures (`--require-signature`), the public API
against the branch (`api.py`), the refs, and an existing `--tag`. `--sign` signs after the
variants' checks and the API guard, before the first write (`sign.py`). The token
(HF_TOKEN or `hf auth login`) and URL credentials are never printed (`hub.Scrub`).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..stages.check import BYTECODE, SIGNATURE_CODES, check_variant, variant_dirs
from ..stages.frameworks import not_made_by
from ..stages.plan import input_files
from ..core import gitinfo
from ..core import manifest as manifest_mod
from ..core.built import BuiltVariant
from ..core.errors import BuildError
from ..core.metadata import KernelGit, VariantMetadata
from ..core.layout import MANIFEST, METADATA, Layout
from ..core.runner import capture
from . import api
from .card import card_text
from .hub import REPO_TYPE, HubClient, check_client, check_endpoint
from .sign import SigningOptions, require_signed, sign_variants
from .sync import Diff, SyncResult, compute_diff, git_blob_oid, sync_branch

MAIN = "main"
README = "README.md"
MAX_OPERATIONS = 1000  # the reference uploader's batch size; one commit is still atomic above it

Log = Callable[[str], None]


def _silent(_: str) -> None:
    pass


# ----------------------------------------------------------------------------- results


@dataclass
class PullRequest:
    branch: str
    url: str


@dataclass
class UploadResult:
    """`--output-json`: ours, with the fields upstream's `kernel-builder upload --output-json`
    writes and CI bots read (`status`, `repo_id`, `branch`, `url`, `pull_requests`)."""

    status: str  # uploaded | unchanged | pr-opened | dry-run
    repo_id: str
    branch: str
    commit: str | None
    url: str
    pr_url: str | None
    added: list[str]
    changed: list[str]
    deleted: list[str]
    unchanged: list[str]
    variants: list[str]
    skipped: dict[str, list[str]]
    readme: dict[str, Any]
    tag: str | None = None
    pull_requests: list[PullRequest] = field(default_factory=list)  # every one opened

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------- local side


def select_variants(project: Path, build_dir: Path, manifest: manifest_mod.Manifest, *,
                    allow_dirty: bool, load: bool = True, python: str | None = None,
                    log: Log = _silent, warn: Log = _silent, resign: bool = False
                    ) -> tuple[list[BuiltVariant], dict[str, list[str]]]:
    """The variants to upload and the skipped ones with their reasons; refuses bad folders.
    With `resign` (upload --sign) a stale or unreadable signature is no reason to skip: it is
    replaced."""
    general = manifest.general
    if not build_dir.is_dir() or not variant_dirs(build_dir):
        raise BuildError("no variants to upload", file=build_dir, hint="run `kbuild build` first")
    dirs = variant_dirs(build_dir)
    read = {d.name: BuiltVariant.read(d) for d in dirs}
    metas = {name: built.metadata for name, (built, _) in read.items() if built is not None}
    versions = sorted({m.version for m in metas.values()})
    if len(versions) > 1:
        listing = ", ".join(f"{n}: {m.version}" for n, m in metas.items())
        raise BuildError(f"the build folder mixes kernel versions ({listing})", file=build_dir,
                         hint="remove the stale variants (`kbuild clean`) and rebuild")
    if versions and versions[0] != general.version:
        raise BuildError(f"the variants are version {versions[0]} but build.toml says "
                         f"{general.version}", file=project / MANIFEST,
                         key="general.version", hint="rebuild after changing the version")
    names = {m.name for m in metas.values()}
    if names - {general.name}:
        raise BuildError(f"the build folder holds variants of {', '.join(sorted(map(str, names)))}"
                         f", not of {general.name}", file=build_dir, hint="pass the right --build-dir")

    state = gitinfo.git_state(project, input_files(project, manifest))
    if not allow_dirty:
        if state is not None and state.dirty:
            raise BuildError("the kernel project has uncommitted changes (or input files git "
                             "does not track)", file=project,
                             hint="commit them and rebuild, or pass --allow-dirty")
        for name, meta in metas.items():
            if (git := _kernel_git(meta)) and git.dirty:
                raise BuildError(f"variant {name} was built from a tree with uncommitted changes",
                                 file=build_dir / name / METADATA, key="provenance.kernel.dirty",
                                 hint="commit, rebuild and upload again, or pass --allow-dirty")

    chosen: list[BuiltVariant] = []
    skipped: dict[str, list[str]] = {}
    for d in dirs:
        stale = not_made_by(manifest, d.name, project)
        if stale:  # e.g. a torchXY variant left after switching to [torch.stable-abi]
            skipped[d.name] = [f"not a variant of this build.toml: {stale}; an earlier build left "
                               "it (`kbuild clean` removes it)"]
            warn(f"skipping {d.name}: " + skipped[d.name][0])
            continue
        report = check_variant(d, python=python, load=load)
        problems = [p for p in report.problems
                    if p.code != BYTECODE and not (resign and p.code in SIGNATURE_CODES)]
        notes = list(report.notes)  # e.g. "not loadable on this machine" for a CUDA variant
        if problems:
            skipped[d.name] = problems
            warn(f"skipping {d.name}: " + "; ".join(problems))
            continue
        built = read[d.name][0]
        assert built is not None  # an unreadable variant has problems
        git = _kernel_git(built.metadata)
        built_from = git.commit if git else None
        if state is not None and built_from and _sources_differ(project, built_from):
            warn(f"{d.name} was built from commit {built_from[:12]}; the kernel's sources have "
                 "changed since (rebuild to upload the current state)")
        log(f"checked {d.name}: ok" + (f"; {'; '.join(notes)}" if notes else ""))
        chosen.append(built)
    if not chosen:
        raise BuildError("no variant passed `kbuild check`; nothing to upload", file=build_dir,
                         hint="fix the problems above and rebuild")
    if any(v.metadata.provenance and v.metadata.provenance.kernel_builder.dirty for v in chosen):
        warn("the variants were built by a pixi-kernel-builder checkout with uncommitted changes; "
             "`kernels` will warn about a dirty tree when loading them")
    return chosen, skipped


def _kernel_git(meta: VariantMetadata) -> KernelGit | None:
    """The kernel's git state a variant was built from (None: not built in git)."""
    return meta.provenance.kernel if meta.provenance else None


def _sources_differ(project: Path, commit: str) -> bool:
    """Whether the project folder at HEAD differs from `commit` (unknown commits count as no)."""
    return capture(["git", "-C", str(project), "diff", "--quiet", commit, "HEAD", "--", "."]
                   ).returncode == 1


def version_files(project: Path, variants: list[BuiltVariant]) -> dict[str, Path]:
    """path in repo -> local file, for the version branch."""
    files: dict[str, Path] = {}
    for v in variants:
        for p in v.files():
            files[f"build/{v.name}/{p.relative_to(v.path).as_posix()}"] = p
    bench = project / "benchmarks"
    if bench.is_dir():
        for p in sorted(bench.glob("benchmark*.py")):
            if p.is_file():
                files[f"benchmarks/{p.name}"] = p
    return files


# ----------------------------------------------------------------------------- upload


def _check_tag(tag: str, version: int) -> None:
    m = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", tag)
    if not m:
        raise BuildError(f"--tag {tag!r} is not a full release tag like v{version}.0.0")
    if int(m[1]) != version:
        raise BuildError(f"--tag {tag} does not belong to version {version} (branch v{version})",
                         hint=f"use v{version}.<minor>.<patch>, or bump general.version")


@dataclass(frozen=True)
class UploadOptions:
    """What `kbuild upload` was asked to do, resolved once."""

    repo_id: str | None = None       # default: build.toml [general.hub] repo-id
    build_dir: Path | None = None    # default: PROJECT/build
    tag: str | None = None           # also tag the commit (vX.Y.Z)
    create_pr: bool = False
    dry_run: bool = False
    allow_dirty: bool = False
    private: bool = False            # when creating the repo
    load: bool = True                # `check` loads each variant where this machine can
    python: str | None = None        # interpreter for that load
    endpoint: str | None = None      # default: HF_ENDPOINT or the Hub
    token: str | None = None         # default: HF_TOKEN or `hf auth login`
    retries: int = 4
    backoff: float = 0.5
    output_json: Path | None = None
    sign: bool = False               # sign each variant's metadata.json before the first write
    require_signature: bool = False  # refuse variants without a current signature
    signing: SigningOptions = SigningOptions()
    allow_api_change: bool = False   # upload even if the public API of this version breaks
    branch: str | None = None        # default: build.toml [general.hub] branch, else v<version>


BRANCH = re.compile(r"(?!.*\.\.)(?!.*@\{)(?!/)(?!.*/$)(?!.*\.lock$)[A-Za-z0-9._/-]{1,200}")


def check_branch(branch: str) -> str:
    """A branch name the Hub and git accept (refused before anything is read or written)."""
    if not BRANCH.fullmatch(branch) or branch.startswith(("-", ".")) or "//" in branch:
        raise BuildError(f"--branch {branch!r} is not a branch name", key="--branch",
                         hint="letters, digits, `.`, `_`, `-` and `/` (no `..`, no leading `-`, "
                              "`.` or `/`), e.g. main or v1")
    return branch


def upload(project: Path, options: UploadOptions = UploadOptions(), *, log: Log = print,
           warn: Log = print) -> UploadResult:
    o = options
    repo_id, build_dir, tag, create_pr, dry_run = o.repo_id, o.build_dir, o.tag, o.create_pr, o.dry_run
    check_endpoint(o.endpoint)  # before anything imports huggingface_hub
    if not dry_run:
        check_client()
    project = project.resolve()
    manifest = manifest_mod.load(project, warn=warn)
    general = manifest.general
    repo_id = repo_id or general.hub.repo_id
    if not repo_id:
        raise BuildError("no repo id to upload to", file=project / MANIFEST,
                         key="general.hub.repo-id", hint="set it in build.toml or pass --repo-id")
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo_id):
        raise BuildError(f"repo id {repo_id!r} is not of the form org/name", key="--repo-id")
    if tag is not None:
        _check_tag(tag, general.version)
        if create_pr:
            raise BuildError("--tag cannot be combined with --create-pr",
                             hint="merge the pull request, then tag the merge commit")
    if not dry_run and not (o.token or HubClient._token()):
        raise BuildError("no Hugging Face token", hint="set HF_TOKEN or run `hf auth login`")
    branch = check_branch(o.branch) if o.branch else general.hub.branch or f"v{general.version}"
    build_dir = Layout.of(project, build_dir).build_dir

    hub = HubClient(repo_id, endpoint=o.endpoint, token=o.token, log=warn, retries=o.retries,
                    backoff=o.backoff)
    if not dry_run and not create_pr:
        _check_write_access(hub)  # a wrong token fails in a second, before the load checks

    variants, skipped = select_variants(project, build_dir, manifest, allow_dirty=o.allow_dirty,
                                        load=o.load, python=o.python, log=log, warn=warn,
                                        resign=o.sign)
    if o.require_signature and not o.sign:
        require_signed(variants, skipped)
    if o.load:  # the API is what the load reports (publish/api.py)
        api.guard(api.api_report(hub, branch, variants, python=o.python), project=project,
                  version=general.version, allow=o.allow_api_change, log=log, warn=warn)
    if o.sign and not dry_run:  # after the checks, before the first write
        sign_variants(variants, o.signing, log=log)
    elif o.sign:
        log(f"dry run: would sign {len(variants)} variant(s); no certificate is requested")
    to_upload = version_files(project, variants)
    readme, readme_source = card_text(project, manifest, repo_id, variants)
    if len(to_upload) > MAX_OPERATIONS:
        log(f"note: {len(to_upload)} files in one commit (the reference uploader batches by "
            f"{MAX_OPERATIONS}); one commit keeps the upload atomic")

    names = ", ".join(v.name for v in variants)
    message = f"Upload {general.name} version {general.version} ({names})"
    description = _commit_description(variants)
    delete_under = [f"build/{v.name}/" for v in variants]

    version_branch = dict(local=to_upload, dirs=["build", "benchmarks"], files=[],
                          delete_under=delete_under, message=message, description=description)
    main_branch = dict(local={README: readme.encode()}, dirs=[], files=[README], delete_under=[],
                       message=f"Update README.md ({readme_source})", description="")

    # Reads and checks only, up to the first write.
    exists = hub.exists()
    branches, tags = hub.call("reading refs", hub.refs) if exists else ({}, {})
    branch_exists = branch in branches
    if dry_run or tag in tags:
        planned = (sync_branch(hub, branch=branch, create_pr=False, dry_run=True, **version_branch)
                   if branch_exists else SyncResult(compute_diff(
                       {p: git_blob_oid(f) for p, f in to_upload.items()}, {}, delete_under), None, None))
        if tag in tags:
            _check_tag_stays(hub, tag, tags[tag], branch, planned)  # type: ignore[arg-type]
    if dry_run:
        readme_sync = (sync_branch(hub, branch=MAIN, create_pr=False, dry_run=True, **main_branch)
                       if exists else SyncResult(Diff(added=[README]), None, None))
        _print_plan(log, repo_id, branch, planned.diff, readme_sync.diff, exists, branch_exists,
                    create_pr, tag)
        result = _result("dry-run", hub, repo_id, branch, planned, variants, skipped,
                         _readme_json(readme_sync, readme_source), tag)
        _write_json(o.output_json, result)
        return result

    if not exists:
        hub.call(f"creating {repo_id}", lambda: hub.api.create_repo(
            repo_id, repo_type=REPO_TYPE, private=o.private, exist_ok=True))
        log(f"created kernel repo {repo_id}" + (" (private)" if o.private else ""))
    if not branch_exists and branch != MAIN:
        hub.call(f"creating branch {branch}", lambda: hub.api.create_branch(
            repo_id, branch=branch, revision=MAIN, repo_type=REPO_TYPE, exist_ok=True))
        log(f"created branch {branch} from {MAIN}")

    sync = sync_branch(hub, branch=branch, create_pr=create_pr, dry_run=False, **version_branch)
    if create_pr:
        status = "pr-opened" if sync.pr_url else "unchanged"
    else:
        status = "uploaded" if sync.commit else "unchanged"
    if tag is not None:  # before the README: a failure here leaves main as it was
        _tag(hub, tag, sync.commit or sync.head)  # type: ignore[arg-type]
    readme_sync = sync_branch(hub, branch=MAIN, create_pr=create_pr, dry_run=False, **main_branch)

    diff = sync.diff
    if create_pr and sync.pr_url:
        log(f"opened pull request {hub.scrub(sync.pr_url)} against {branch}: {len(diff.added)} "
            f"added, {len(diff.changed)} changed, {len(diff.deleted)} deleted")
        log(f"Pull request created: {hub.scrub(sync.pr_url)}")  # upstream's line, read by CI bots
    elif sync.commit:
        log(f"uploaded {names} to {repo_id}@{branch}: {len(diff.added)} added, "
            f"{len(diff.changed)} changed, {len(diff.deleted)} deleted, "
            f"{len(diff.unchanged)} unchanged -> {hub.scrub(sync.commit_url or sync.commit)}")
    else:
        log(f"{repo_id}@{branch} is up to date ({len(diff.unchanged)} files); no commit")
    if tag is not None:
        log(f"tagged {(sync.commit or sync.head or '')[:12]} as {tag}")
    if readme_sync.pr_url:
        log(f"opened pull request {hub.scrub(readme_sync.pr_url)} for README.md on {MAIN}")
        log(f"Pull request created: {hub.scrub(readme_sync.pr_url)}")
    elif readme_sync.commit:
        log(f"updated README.md on {MAIN} ({readme_source})")
    result = _result(status, hub, repo_id, branch, sync, variants, skipped,
                     _readme_json(readme_sync, readme_source), tag)
    _write_json(o.output_json, result)
    return result


def _check_write_access(hub: HubClient) -> None:
    """The token is valid and not read-only (a fine-grained token's scopes are the Hub's call)."""
    info = hub.call("checking the token", hub.api.whoami)
    token = (info.get("auth") or {}).get("accessToken") or {} if isinstance(info, dict) else {}
    if token.get("role") == "read":
        raise BuildError("the Hugging Face token is read-only; nothing was written",
                         hint="use a token with write access (HF_TOKEN or `hf auth login`)")


def _check_tag_stays(hub: HubClient, tag: str, tagged: str, branch: str, planned: SyncResult) -> None:
    """An existing release tag is fine only where this upload ends: the unchanged branch head."""
    if planned.head == tagged and planned.diff.empty:
        return
    d = planned.diff
    change = (f"this upload would commit {len(d.added)} added, {len(d.changed)} changed and "
              f"{len(d.deleted)} deleted files to {branch}" if not d.empty
              else f"{branch} is at {(planned.head or 'nothing')[:12]}")
    raise BuildError(f"tag {tag} already exists on {hub.repo_id} at {tagged[:12]}, and {change}; "
                     "nothing was written", hint="release tags are never moved; pick the next "
                     "version number")


def _commit_description(variants: list[BuiltVariant]) -> str:
    lines = ["Uploaded with pixi-kernel-builder."]
    for v in variants:
        kernel = _kernel_git(v.metadata)
        src = f" from {kernel.commit}" + (" (dirty)" if kernel.dirty else "") if kernel else ""
        lines.append(f"- {v.name}: {v.metadata.id}{src}")
    return "\n".join(lines)


def _tag(hub: HubClient, tag: str, target: str) -> None:
    existing = hub.call("reading tags", hub.tags)
    if existing.get(tag) == target:
        return
    if tag in existing:  # created by someone else since the check before the first write
        raise BuildError(f"tag {tag} was created on {hub.repo_id} at {existing[tag][:12]} during "
                         f"the upload; {target[:12]} is not tagged",
                         hint="release tags are never moved; pick the next version number")
    hub.call(f"tagging {tag}", lambda: hub.api.create_tag(
        hub.repo_id, tag=tag, revision=target, repo_type=REPO_TYPE, exist_ok=False))


def _readme_json(sync: SyncResult, source: str) -> dict[str, Any]:
    d = sync.diff
    state = "added" if d.added else "changed" if d.changed else "unchanged"
    return {"source": source, "state": state, "commit": sync.commit, "pr_url": sync.pr_url}


def _result(status: str, hub: HubClient, repo_id: str, branch: str, sync: SyncResult,
            variants: list[BuiltVariant], skipped: dict[str, list[str]], readme: dict[str, Any],
            tag: str | None) -> UploadResult:
    d = sync.diff
    url = hub.scrub(sync.commit_url or f"{hub.endpoint}/kernels/{repo_id}/tree/{branch}")
    pr_url = hub.scrub(sync.pr_url) if sync.pr_url else None
    readme = {**readme, "pr_url": hub.scrub(readme["pr_url"]) if readme.get("pr_url") else None}
    prs = [PullRequest(b, u) for b, u in ((branch, pr_url), (MAIN, readme["pr_url"])) if u]
    return UploadResult(status=status, repo_id=repo_id, branch=branch, commit=sync.commit, url=url,
                        pr_url=pr_url, added=d.added,
                        changed=d.changed, deleted=d.deleted, unchanged=d.unchanged,
                        variants=[v.name for v in variants], skipped=skipped, readme=readme, tag=tag,
                        pull_requests=prs)


def _write_json(path: Path | None, result: UploadResult) -> None:
    if path is None:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    tmp.replace(path)


def _print_plan(log: Log, repo_id: str, branch: str, diff: Diff, readme: Diff, exists: bool,
                branch_exists: bool, create_pr: bool, tag: str | None) -> None:
    log(f"dry run: nothing is written to {repo_id}")
    if not exists:
        log(f"would create kernel repo {repo_id}")
    if not branch_exists and branch != MAIN:
        log(f"would create branch {branch} from {MAIN}")
    target = f"a pull request against {branch}" if create_pr else f"branch {branch}"
    log(f"{target}: {len(diff.added)} added, {len(diff.changed)} changed, "
        f"{len(diff.deleted)} deleted, {len(diff.unchanged)} unchanged")
    for label, paths in (("add", diff.added), ("change", diff.changed), ("delete", diff.deleted)):
        for p in paths:
            log(f"  {label:<7} {p}")
    state = "add" if readme.added else "change" if readme.changed else "unchanged"
    log(f"{README} on {MAIN}: {state}")
    if tag:
        log(f"would tag the {branch} commit as {tag}")
