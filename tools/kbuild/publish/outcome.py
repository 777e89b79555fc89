"""What `kbuild upload` reports: the `--output-json` summary in the shape kernel-builder's
`upload --output-json` writes (kernels-community's bot reads it), with our extra fields, the lines
upstream prints, and a dry run's plan."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from ..core.built import BuiltVariant
from ..core.files import write_atomic
from .hub import HubClient
from .sync import Diff, SyncResult

Log = Callable[[str], None]
# upstream's three statuses, and our dry run
NO_CHANGES, UPLOADED, PR_CREATED, DRY_RUN = "no_changes", "uploaded", "pull_request_created", "dry_run"
PUBLIC_HUB = ("huggingface.co", "www.huggingface.co", "hf.co")


@dataclass
class PullRequest:
    branch: str
    url: str


@dataclass
class UploadResult:
    """`--output-json`: upstream's `status`, `repo_id`, `branch`, `url` and `pull_requests`
    (`url`: the branch's page for `uploaded`, else null), then ours."""

    status: str
    repo_id: str
    branch: str | None
    url: str | None
    pull_requests: list[PullRequest] = field(default_factory=list)
    commit: str | None = None          # the commit on `branch` (None: nothing committed there)
    commit_url: str | None = None
    pr_url: str | None = None          # the pull request against `branch`
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)
    readme: dict[str, Any] = field(default_factory=dict)
    tag: str | None = None
    api: list[str] = field(default_factory=list)  # the API guard's notes and changes

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def kernel_url(endpoint: str, repo_id: str, branch: str | None) -> str:
    """The repo's page (a branch's, with `branch`): upstream's https://hf.co/kernels/<repo_id>
    for the public Hub, the same path on any other endpoint."""
    host = (urlsplit(endpoint).hostname or "").lower()
    base = "https://hf.co" if host in PUBLIC_HUB else endpoint.rstrip("/")
    return f"{base}/kernels/{repo_id}" + (f"/tree/{branch}" if branch else "")


def write_json(path: Path | None, result: UploadResult) -> None:
    """The summary, whole or not at all (written beside it, then renamed over it)."""
    if path is None:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(result.to_json(), indent=2) + "\n")


def announce(result: UploadResult, *, say: Log, note: Log) -> None:
    """Upstream's result lines: `Kernel uploaded: URL` or one `Pull request created: URL` per
    pull request (stdout), `No changes to upload.` (stderr)."""
    if result.status == UPLOADED and result.url:
        say(f"Kernel uploaded: {result.url}")
    elif result.status == PR_CREATED:
        for pr in result.pull_requests:
            say(f"Pull request created: {pr.url}")
    elif result.status == NO_CHANGES:
        note("No changes to upload.")


def print_plan(log: Log, repo_id: str, plans: list[tuple[str, Diff, bool]], exists: bool,
               create_pr: bool, tag: str | None, readme_on: str) -> None:
    """A dry run's plan: per branch (name, diff, exists), what would be added, changed, deleted."""
    log(f"dry run: nothing is written to {repo_id}")
    if not exists:
        log(f"would create kernel repo {repo_id}")
    for branch, diff, branch_exists in plans:
        if not branch_exists and branch != "main":
            log(f"would create branch {branch} from main")
        target = f"a pull request against {branch}" if create_pr else f"branch {branch}"
        log(f"{target}: {len(diff.added)} added, {len(diff.changed)} changed, "
            f"{len(diff.deleted)} deleted, {len(diff.unchanged)} unchanged")
        for label, paths in (("add", diff.added), ("change", diff.changed), ("delete", diff.deleted)):
            for p in paths:
                log(f"  {label:<7} {p}")
    readme = next(d for b, d, _ in plans if b == readme_on)
    state = ("add" if "README.md" in readme.added else "change" if "README.md" in readme.changed
             else "unchanged")
    log(f"README.md on {readme_on}: {state}")
    if tag:
        log(f"would tag the {plans[0][0]} commit as {tag}")


def result_of(status: str, hub: HubClient, branch: str, syncs: list[SyncResult],
              variants: list[BuiltVariant], skipped: dict[str, list[str]], readme_source: str,
              tag: str | None, api_lines: list[str]) -> UploadResult:
    """The summary of an upload whose commits (or a dry run's plans) are `syncs`: the version
    branch's first, README.md's last (the same one for main)."""
    repo_id = hub.repo_id
    main = syncs[0]
    readme_sync = syncs[-1]
    d = main.diff
    prs = [PullRequest(b, hub.scrub(s.pr_url)) for b, s in zip((branch, "main"), syncs) if s.pr_url]
    rd = readme_sync.diff
    readme_state = ("added" if "README.md" in rd.added else "changed" if "README.md" in rd.changed
                    else "unchanged")
    return UploadResult(
        status=status, repo_id=repo_id, branch=branch,
        url=kernel_url(hub.scrub(hub.endpoint), repo_id, branch) if status == UPLOADED else None,
        pull_requests=prs, commit=main.commit,
        commit_url=hub.scrub(main.commit_url) if main.commit_url else None,
        pr_url=hub.scrub(main.pr_url) if main.pr_url else None,
        added=d.added, changed=d.changed, deleted=d.deleted, unchanged=d.unchanged,
        variants=[v.name for v in variants], skipped=skipped,
        readme={"source": readme_source, "state": readme_state, "commit": readme_sync.commit,
                "pr_url": hub.scrub(readme_sync.pr_url) if readme_sync.pr_url else None},
        tag=tag, api=api_lines)


def log_done(log: Log, hub: HubClient, branches: list[str], synced: list[SyncResult],
             tag: str | None, readme_source: str) -> None:
    """What each commit did."""
    repo_id = hub.repo_id
    for branch, sync in zip(branches, synced):
        d = sync.diff
        counts = (f"{len(d.added)} added, {len(d.changed)} changed, {len(d.deleted)} deleted, "
                  f"{len(d.unchanged)} unchanged")
        if sync.pr_url:
            log(f"opened pull request {hub.scrub(sync.pr_url)} against {branch}: {counts}")
        elif sync.commit:
            log(f"uploaded to {repo_id}@{branch}: {counts} -> "
                f"{hub.scrub(sync.commit_url or sync.commit)}")
        else:
            log(f"{repo_id}@{branch} is up to date ({len(d.unchanged)} files); no commit")
        if branch == branches[0] and tag is not None:
            log(f"tagged {(sync.commit or sync.head or '')[:12]} as {tag}")
    if "README.md" in (synced[-1].diff.added + synced[-1].diff.changed):
        log(f"README.md on {branches[-1]}: {readme_source}")
