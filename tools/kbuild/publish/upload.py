"""Stage: publish — upload a checked build folder to a Hub kernel repo (`kbuild upload`).

What lands where (the reference uploader's layout):
- `build/<variant>/…`, `benchmarks/benchmark*.py` and each variant's API record
  (`api/<variant>.json`, publish/api.py) on branch `v<version>` (or --branch; created from `main`
  when missing, without main's `build/`), in ONE commit per upload: every add plus a delete of
  every remote file under an uploaded variant's folder that the local variant no longer has
  (`sync.py`).
- With `--tag`, the release tag on that commit; then `README.md` on `main`, from CARD.md rendered
  or a generated card (`card.py`), in a second commit (the same one when the branch is `main`).

Everything is prepared and checked before the first write: the options, the card (rendered, its
front matter read), the endpoint, the token (valid, not read-only), the variants (checked and
loaded, each in a process without this environment's secrets), the signatures
(`--require-signature`), the public API against the branch's records (`api.py`; the branch's
code is never run), the local variants unchanged since before their loads, every branch's files
and their diff, the refs and an existing `--tag`. `--sign` signs after all of that (`sign.py`).
A failure between two writes names what landed; the same command again uploads only what is
missing. The token (HF_TOKEN or `hf auth login`) and URL credentials are never printed
(`hub.Scrub`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..stages.check import BYTECODE, PROBERS, SIGNATURE_CODES, check_variant
from ..stages.frameworks import not_made_by
from ..stages.plan import input_files
from ..core import gitinfo
from ..core import manifest as manifest_mod
from ..core.built import BuiltVariant, shipped_files, variant_dirs
from ..core.errors import BuildError
from ..core.metadata import KernelGit, VariantMetadata
from ..core.layout import MANIFEST, METADATA, SIGNATURE, Layout
from ..core.runner import capture
from . import api
from .card import card_text, read_card, render_card
from .hub import REPO_TYPE, HubClient, check_client, check_endpoint, no_progress_bars
from .outcome import (DRY_RUN, NO_CHANGES, PR_CREATED, UPLOADED, UploadResult, announce,
                      kernel_url, log_done, print_plan, result_of, write_json)
from .refs import check_branch, check_tag, hub_branch, hub_repo
from .sign import SigningOptions, require_signed, sign_variants
from .sync import Diff, SyncResult, compute_diff, git_blob_oid, local_oids, sync_branch

MAIN = "main"
README = "README.md"
MAX_OPERATIONS = 1000  # the reference uploader's batch size; one commit is still atomic above it

Log = Callable[[str], None]


def _silent(_: str) -> None:
    pass


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
    repo_type: str = REPO_TYPE       # upstream's --repo-type: kernel repos only
    quiet: bool = False              # no progress lines, no progress bars (-q)


@dataclass
class BranchPlan:
    """One commit to make: `branch` brought to `local` (sync.py's arguments)."""

    branch: str
    local: dict[str, Path | bytes]
    dirs: list[str]
    files: list[str]
    delete_under: list[str]
    message: str
    description: str = ""
    exists: bool = True
    oids: dict[str, str] | None = None

    def sync(self, hub: HubClient, *, create_pr: bool, dry_run: bool) -> SyncResult:
        return sync_branch(hub, branch=self.branch, local=self.local, dirs=self.dirs,
                           files=self.files, delete_under=self.delete_under, message=self.message,
                           description=self.description, create_pr=create_pr, dry_run=dry_run,
                           base=MAIN, oids=self.oids)


def upload(project: Path, options: UploadOptions = UploadOptions(), *, log: Log = print,
           warn: Log = print, note: Log | None = None) -> UploadResult:
    """`log`: progress and the result line (stdout); `warn`: warnings; `note`: upstream's
    stderr line (default: `log`). `quiet` keeps the result lines and warnings only."""
    check_endpoint(options.endpoint)  # before anything imports huggingface_hub
    with no_progress_bars(options.quiet):
        return _upload(project, options, say=log, progress=_silent if options.quiet else log,
                       warn=warn, note=note or log)


def _upload(project: Path, o: UploadOptions, *, say: Log, progress: Log, warn: Log,
            note: Log) -> UploadResult:
    log = progress
    create_pr, dry_run, tag = o.create_pr, o.dry_run, o.tag
    if o.repo_type != REPO_TYPE:
        raise BuildError(f"--repo-type {o.repo_type!r}: kbuild uploads to kernel repos only",
                         key="--repo-type", hint="pass --repo-type kernel (the default) or leave "
                                                 "it out")
    if o.branch is not None:
        check_branch(o.branch)
    if not dry_run:
        check_client()
    project = project.resolve()
    manifest = manifest_mod.load(project, warn=warn)
    general = manifest.general
    repo_id = hub_repo(project, general, o.repo_id, purpose="upload to")
    if tag is not None:
        check_tag(tag, general.version)
        if create_pr:
            raise BuildError("--tag cannot be combined with --create-pr",
                             hint="merge the pull request, then tag the merge commit")
    branch = hub_branch(general, o.branch)
    card = read_card(project)  # rendered and its front matter read before anything else
    readme = render_card(project, manifest, repo_id, card) if card is not None else None
    if not dry_run and not (o.token or HubClient._token()):
        raise BuildError("no Hugging Face token", hint="set HF_TOKEN or run `hf auth login`")
    build_dir = Layout.of(project, o.build_dir).build_dir

    hub = HubClient(repo_id, endpoint=o.endpoint, token=o.token, log=warn, retries=o.retries,
                    backoff=o.backoff)
    if not dry_run and not create_pr:
        _check_write_access(hub)  # a wrong token fails in a second, before the load checks

    before = {d.name: _fingerprint(d) for d in (variant_dirs(build_dir) if build_dir.is_dir()
                                                 else [])}  # before any of them is loaded
    variants, skipped = select_variants(project, build_dir, manifest, allow_dirty=o.allow_dirty,
                                        load=o.load, python=o.python, log=log, warn=warn,
                                        resign=o.sign)
    if o.require_signature and not o.sign:
        require_signed(variants, skipped)
    records: dict[str, bytes] = {}
    report = None
    if o.load:  # the API is what the load of the local build reports (publish/api.py)
        apis = api.local_apis(variants, o.python)
        report = api.api_report(hub, branch, variants, apis)
        api.guard(report, project=project, version=general.version, allow=o.allow_api_change,
                  log=log, warn=warn)
        records = {v.name: api.api_record(v, a) for v in variants
                   if isinstance(a := apis[v.name], dict)}
        for name in (v.name for v in variants if v.name not in records):
            log(f"api: {name}: no API recorded: {apis[name]}")
    PROBERS.close()  # no process that ran a variant's code is left while its files upload
    _unchanged_since_loaded(variants, before)
    if o.sign and not dry_run:  # after the checks, before the first write
        sign_variants(variants, o.signing, log=log)
        _unchanged_since_loaded(variants, before, but=(SIGNATURE,))
    elif o.sign:
        log(f"dry run: would sign {len(variants)} variant(s); no certificate is requested")
    if readme is None:
        readme_source = "generated"
        readme, _ = card_text(project, manifest, repo_id, variants)
    else:
        readme_source = "CARD.md"

    # Every branch's files, read and hashed; then the Hub's state, read.
    exists = hub.exists()
    branches, tags = hub.call("reading refs", hub.refs) if exists else ({}, {})
    plans = _plans(project, general, variants, records, readme.encode(), readme_source, branch,
                   branch_exists=branch in branches)
    for plan in plans:
        plan.oids = local_oids(plan.local)
    if len(plans[0].local) > MAX_OPERATIONS:
        log(f"note: {len(plans[0].local)} files in one commit (the reference uploader batches "
            f"by {MAX_OPERATIONS}); one commit keeps the upload atomic")
    planned = [(p.sync(hub, create_pr=False, dry_run=True) if exists else
                SyncResult(_new_diff(p), None, None)) for p in plans]
    if tag in tags:
        _check_tag_stays(hub, tag, tags[tag], branch, planned[0])  # type: ignore[arg-type]
    api_lines = ([f"api: {n}" for n in report.notes] + [f"api: {c.line()}" for c in report.changes]
                 if report else [])
    if dry_run:
        print_plan(log, repo_id, [(p.branch, s.diff, p.exists) for p, s in zip(plans, planned)],
                   exists, create_pr, tag, readme_on=plans[-1].branch)
        result = result_of(DRY_RUN, hub, branch, planned, variants, skipped,
                           readme_source, tag, api_lines)
        result.url = kernel_url(hub.scrub(hub.endpoint), repo_id, branch)
        write_json(o.output_json, result)
        return result

    synced = _write(hub, plans, o, tag=tag, exists=exists, log=log)
    if create_pr:
        status = PR_CREATED if any(s.pr_url for s in synced) else NO_CHANGES
    else:
        status = UPLOADED if any(s.commit for s in synced) else NO_CHANGES
    result = result_of(status, hub, branch, synced, variants, skipped, readme_source, tag,
                       api_lines)
    log_done(log, hub, [p.branch for p in plans], synced, tag, readme_source)
    write_json(o.output_json, result)
    announce(result, say=say, note=note)
    return result


def _fingerprint(variant: Path) -> dict[str, str]:
    """Git blob id of every file of a variant folder that ships."""
    return {p.relative_to(variant).as_posix(): git_blob_oid(p) for p in shipped_files(variant)}


def _unchanged_since_loaded(variants: list[BuiltVariant], before: dict[str, dict[str, str]],
                            but: tuple[str, ...] = ()) -> None:
    """Refuses a variant whose files changed since before its load check (a load runs the
    variant's own code, and the API guard loads it again)."""
    for v in variants:
        old = {p: o for p, o in before.get(v.name, {}).items() if p not in but}
        new = {p: o for p, o in _fingerprint(v.path).items() if p not in but}
        if old != new:
            changed = sorted(p for p in old.keys() | new.keys() if old.get(p) != new.get(p))
            raise BuildError(f"variant {v.name} changed while it was checked and loaded "
                             f"({', '.join(changed[:5])}); nothing was written",
                             file=v.path, hint="something changed the build folder (its own code "
                             "when it was loaded?); rebuild, check what it runs at import, and "
                             "upload again")


def _plans(project: Path, general: Any, variants: list[BuiltVariant], records: dict[str, bytes],
           readme: bytes, readme_source: str, branch: str, *, branch_exists: bool
           ) -> list[BranchPlan]:
    """The commits of this upload: the version branch's, then README.md on main (one commit
    when the branch is main). A new branch starts as a copy of main: the main's `build/`, `api/`
    and `benchmarks/` are not carried into it."""
    to_upload: dict[str, Path | bytes] = dict(version_files(project, variants))
    to_upload.update({api.record_path(name): data for name, data in records.items()})
    names = ", ".join(v.name for v in variants)
    dirs = ["build", "benchmarks", api.RECORDS]
    delete_under = ([f"{d}/" for d in dirs] if not branch_exists and branch != MAIN
                    else [f"build/{v.name}/" for v in variants])
    version = BranchPlan(branch, to_upload, dirs, [], delete_under,
                         f"Upload {general.name} version {general.version} ({names})",
                         _commit_description(variants), exists=branch_exists)
    if branch == MAIN:
        version.local[README] = readme
        version.files = [README]
        return [version]
    return [version, BranchPlan(MAIN, {README: readme}, [], [README], [],
                                f"Update README.md ({readme_source})")]


def _new_diff(plan: BranchPlan) -> Diff:
    return compute_diff(plan.oids or {}, {}, plan.delete_under)


def _write(hub: HubClient, plans: list[BranchPlan], o: UploadOptions, *, tag: str | None,
           exists: bool, log: Log) -> list[SyncResult]:
    """The writes, in order; a failure after the first names what landed."""
    landed: list[str] = []

    def step(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except BuildError as e:
            if not landed:
                raise
            raise BuildError(f"{e.message}; already on {hub.repo_id}: {'; '.join(landed)}",
                             hint="run the same command again to finish: it uploads only what "
                                  "is missing") from None

    repo_id = hub.repo_id
    if not exists:
        step(lambda: hub.call(f"creating {repo_id}", lambda: hub.api.create_repo(
            repo_id, repo_type=REPO_TYPE, private=o.private, exist_ok=True)))
        log(f"created kernel repo {repo_id}" + (" (private)" if o.private else ""))
        landed.append("the repo, created")
    synced: list[SyncResult] = []
    for i, plan in enumerate(plans):
        if not plan.exists and plan.branch != MAIN:
            step(lambda: hub.call(f"creating branch {plan.branch}", lambda: hub.api.create_branch(
                repo_id, branch=plan.branch, revision=MAIN, repo_type=REPO_TYPE, exist_ok=True)))
            log(f"created branch {plan.branch} from {MAIN}")
            landed.append(f"branch {plan.branch}, created")
        sync = step(lambda: plan.sync(hub, create_pr=o.create_pr, dry_run=False))
        synced.append(sync)
        d = sync.diff
        if sync.pr_url:
            landed.append(f"pull request {hub.scrub(sync.pr_url)} against {plan.branch}")
        elif sync.commit:
            landed.append(f"{plan.branch} at {sync.commit[:12]} ({len(d.added)} added, "
                          f"{len(d.changed)} changed, {len(d.deleted)} deleted)")
        if i == 0 and tag is not None:  # before the README: a failure here leaves main as it was
            step(lambda: _tag(hub, tag, sync.commit or sync.head))
            landed.append(f"tag {tag}")
    return synced


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
