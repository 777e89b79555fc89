"""Stage: publish — upload a checked build folder to a Hub kernel repo (`kbuild upload`).

What lands where (the reference uploader's layout, spec §7):
- `build/<variant>/…` and `benchmarks/benchmark*.py` on branch `v<version>` (created from
  `main` when missing), in ONE commit per upload: every add plus a delete of every remote file
  under an uploaded variant's folder that the local variant no longer has. The commit names
  the branch head it was computed against (`parent_commit`), so a concurrent push makes it
  fail with 412 instead of being overwritten.
- `README.md` on `main`, from `CARD.md` or a generated card, in a separate commit.

Local files are compared with the remote tree by git blob id: nothing changed, no commit.
A failed commit changes nothing, so transient failures (5xx, 408/429, dropped connections,
timeouts) are retried with backoff; each attempt re-reads the head and recomputes the diff.
The token (HF_TOKEN or `hf auth login`) is never printed: every Hub error becomes one
BuildError line of our own wording, scrubbed of the token.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import gitinfo
from . import manifest as manifest_mod
from .assemble import METADATA
from .check import check_variant, variant_dirs
from .errors import BuildError

REPO_TYPE = "kernel"
MAIN = "main"
README = "README.md"
CARD = "CARD.md"
RETRY_STATUS = (408, 429, 500, 502, 503, 504)
MAX_OPERATIONS = 1000  # the reference uploader's batch size; one commit is still atomic above it

Log = Callable[[str], None]


def _silent(_: str) -> None:
    pass


# ----------------------------------------------------------------------------- results


@dataclass
class Diff:
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.added or self.changed or self.deleted)


@dataclass
class UploadResult:
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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Variant:
    path: Path
    meta: dict
    notes: list[str]

    @property
    def name(self) -> str:
        return self.path.name


# ----------------------------------------------------------------------------- local side


def git_blob_oid(path: Path) -> str:
    """The git blob id of a file (what the Hub reports as its oid), streamed."""
    h = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _bytes_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _shipped_files(variant: Path) -> list[Path]:
    return sorted(p for p in variant.rglob("*")
                  if p.is_file() and "__pycache__" not in p.relative_to(variant).parts
                  and p.suffix != ".pyc")


def _read_meta(variant: Path) -> dict | None:
    try:
        meta = json.loads((variant / METADATA).read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def select_variants(project: Path, build_dir: Path, manifest: manifest_mod.Manifest, *,
                    allow_dirty: bool, load: bool = True, python: str | None = None,
                    log: Log = _silent, warn: Log = _silent
                    ) -> tuple[list[Variant], dict[str, list[str]]]:
    """The variants to upload and the skipped ones with their reasons; refuses bad folders."""
    general = manifest.general
    if not build_dir.is_dir() or not variant_dirs(build_dir):
        raise BuildError("no variants to upload", file=build_dir, hint="run `kbuild build` first")
    dirs = variant_dirs(build_dir)
    metas = {d.name: _read_meta(d) for d in dirs}
    versions = sorted({m.get("version") for m in metas.values() if m and "version" in m}, key=str)
    if len(versions) > 1:
        listing = ", ".join(f"{n}: {m.get('version')}" for n, m in metas.items() if m)
        raise BuildError(f"the build folder mixes kernel versions ({listing})", file=build_dir,
                         hint="remove the stale variants (`kbuild clean`) and rebuild")
    if versions and versions[0] != general.version:
        raise BuildError(f"the variants are version {versions[0]} but build.toml says "
                         f"{general.version}", file=project / manifest_mod.MANIFEST,
                         key="general.version", hint="rebuild after changing the version")
    names = {m.get("name") for m in metas.values() if m and "name" in m}
    if names - {general.name}:
        raise BuildError(f"the build folder holds variants of {', '.join(sorted(map(str, names)))}"
                         f", not of {general.name}", file=build_dir, hint="pass the right --build-dir")

    state = gitinfo.git_state(project)
    if not allow_dirty:
        if state is not None and state.dirty:
            raise BuildError("the kernel project has uncommitted changes", file=project,
                             hint="commit them and rebuild, or pass --allow-dirty")
        for name, meta in metas.items():
            if _provenance(meta, "kernel").get("dirty"):
                raise BuildError(f"variant {name} was built from a tree with uncommitted changes",
                                 file=build_dir / name / METADATA, key="provenance.kernel.dirty",
                                 hint="commit, rebuild and upload again, or pass --allow-dirty")

    chosen: list[Variant] = []
    skipped: dict[str, list[str]] = {}
    for d in dirs:
        report = check_variant(d, python=python, load=load)
        problems = [p for p in report.problems if not _bytecode(p)]
        notes = list(report.notes)  # e.g. "not loadable on this machine" for a CUDA variant
        if problems:
            skipped[d.name] = problems
            warn(f"skipping {d.name}: " + "; ".join(problems))
            continue
        meta = metas[d.name] or {}
        built_from = _provenance(meta, "kernel").get("commit")
        if state is not None and built_from and _sources_differ(project, built_from):
            warn(f"{d.name} was built from commit {built_from[:12]}; the kernel's sources have "
                 "changed since (rebuild to upload the current state)")
        log(f"checked {d.name}: ok" + (f"; {'; '.join(notes)}" if notes else ""))
        chosen.append(Variant(d, meta, notes))
    if not chosen:
        raise BuildError("no variant passed `kbuild check`; nothing to upload", file=build_dir,
                         hint="fix the problems above and rebuild")
    if any(_provenance(v.meta, "kernel-builder").get("dirty") for v in chosen):
        warn("the variants were built by a pixi-kernel-builder checkout with uncommitted changes; "
             "`kernels` will warn about a dirty tree when loading them")
    return chosen, skipped


def _bytecode(problem: str) -> bool:
    """`__pycache__`/`.pyc` in a variant: never uploaded, so no reason to skip it."""
    return (problem.startswith("layout: ") and problem.endswith("must not be shipped")
            and ("__pycache__" in problem or ".pyc" in problem))


def _provenance(meta: dict | None, part: str) -> dict:
    value = ((meta or {}).get("provenance") or {}).get(part)
    return value if isinstance(value, dict) else {}


def _sources_differ(project: Path, commit: str) -> bool:
    """Whether the project folder at HEAD differs from `commit` (unknown commits count as no)."""
    import subprocess
    try:
        proc = subprocess.run(["git", "-C", str(project), "diff", "--quiet", commit, "HEAD", "--", "."],
                              capture_output=True)
    except OSError:
        return False
    return proc.returncode == 1


def version_files(project: Path, variants: list[Variant]) -> dict[str, Path]:
    """path in repo -> local file, for the version branch."""
    files: dict[str, Path] = {}
    for v in variants:
        for p in _shipped_files(v.path):
            files[f"build/{v.name}/{p.relative_to(v.path).as_posix()}"] = p
    bench = project / "benchmarks"
    if bench.is_dir():
        for p in sorted(bench.glob("benchmark*.py")):
            if p.is_file():
                files[f"benchmarks/{p.name}"] = p
    return files


# ----------------------------------------------------------------------------- the card


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().splitlines()[0].strip() if (doc or "").strip() else ""


def _literal_all(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            return [str(v) for v in value]
    return None


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def describe_functions(init: Path) -> tuple[str, list[str]]:
    """(module docstring's first line, one bullet per public function) from source, unimported."""
    tree = _parse(init)
    if tree is None:
        return "", []
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    names = _literal_all(tree)
    if names is None:
        names = [n for n in defs if not n.startswith("_")]
    bullets = []
    for name in names:
        node = defs.get(name)
        if node is None:
            bullets.append(f"- `{name}`")
            continue
        sig = f"{name}({ast.unparse(node.args)})"
        if node.returns is not None:
            sig += f" -> {ast.unparse(node.returns)}"
        doc = _first_line(ast.get_docstring(node))
        bullets.append(f"- `{sig}`" + (f": {doc}" if doc else ""))
    return _first_line(ast.get_docstring(tree)), bullets


def describe_layers(variant: Path) -> list[str]:
    for candidate in (variant / "layers" / "__init__.py", variant / "layers.py"):
        tree = _parse(candidate) if candidate.is_file() else None
        if tree is None:
            continue
        names = _literal_all(tree)
        classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        if names is None:
            names = [n for n in classes if not n.startswith("_")]
            for node in tree.body:  # `from .rms import RMSNorm` re-exports
                if isinstance(node, ast.ImportFrom) and node.level:
                    names += [a.asname or a.name for a in node.names if not a.name.startswith("_")]
        bullets = []
        for name in dict.fromkeys(names):
            doc = _first_line(ast.get_docstring(classes[name])) if name in classes else ""
            bullets.append(f"- `{name}`" + (f": {doc}" if doc else ""))
        return bullets
    return []


def generate_card(manifest: manifest_mod.Manifest, repo_id: str, variants: list[Variant]) -> str:
    general = manifest.general
    module = general.module_name
    summary, functions = describe_functions(variants[0].path / "__init__.py")
    layers = describe_layers(variants[0].path)
    lines = ["---", f"license: {general.license}", "tags:", "- kernels", "---", "",
             f"# {general.name}", ""]
    if summary:
        lines += [summary, ""]
    lines += ["A compute kernel for PyTorch in the Hugging Face "
              "[`kernels`](https://github.com/huggingface/kernels) format.", "",
              "## How to use", "", "```python", "from kernels import get_kernel", "",
              f'{module} = get_kernel("{repo_id}", version={general.version})']
    if functions and "`" in functions[0]:
        first = functions[0].split("`")[1].split("(")[0]
        lines.append(f"{module}.{first}(...)")
    lines += ["```", ""]
    lines += ["## Functions", ""] + (functions or ["(none exported)"]) + [""]
    if layers:
        lines += ["## Layers", "", "For `kernels.kernelize` (`LayerRepository(repo_id="
                  f'"{repo_id}", layer_name=...)`):', ""] + layers + [""]
    lines += [f"## Variants (version {general.version})", ""]
    lines += [f"- `{v.name}`" for v in variants] + [""]
    sources = [f"- {k}: {getattr(general, k)}" for k in ("upstream", "source") if getattr(general, k)]
    if sources:
        lines += ["## Source", ""] + sources + [""]
    lines += ["Built with pixi-kernel-builder.", ""]
    return "\n".join(lines)


def card_text(project: Path, manifest: manifest_mod.Manifest, repo_id: str,
              variants: list[Variant]) -> tuple[str, str]:
    """(README text, where it came from)."""
    card = project / CARD
    if card.is_file():
        return card.read_text(encoding="utf-8"), CARD
    return generate_card(manifest, repo_id, variants), "generated"


# ----------------------------------------------------------------------------- Hub errors


def _transport_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module, name in (("httpx2", "TransportError"), ("httpx", "TransportError"),
                         ("requests.exceptions", "ConnectionError"),
                         ("requests.exceptions", "Timeout")):
        try:
            errors.append(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def is_transient(exc: BaseException) -> bool:
    from huggingface_hub.errors import OfflineModeIsEnabled
    if isinstance(exc, OfflineModeIsEnabled):
        return False
    status = _status(exc)
    if status is not None:
        return status in RETRY_STATUS
    return isinstance(exc, _transport_errors())


class _Scrub:
    """Removes the token from any text we print."""

    def __init__(self, token: str | None):
        self.token = token

    def __call__(self, text: str) -> str:
        return text.replace(self.token, "***") if self.token and len(self.token) >= 4 else text


def hub_error(exc: BaseException, *, what: str, repo_id: str, endpoint: str,
              scrub: Callable[[str], str] = str) -> BuildError:
    """One clear line for a Hub failure (never the token, never a traceback)."""
    from huggingface_hub.errors import OfflineModeIsEnabled
    org = repo_id.split("/", 1)[0]
    status = _status(exc)
    server_lines = str(getattr(exc, "server_message", None) or "").strip().splitlines()
    server = scrub(server_lines[0]) if server_lines else ""
    if isinstance(exc, OfflineModeIsEnabled):
        return BuildError(f"{what}: HF_HUB_OFFLINE is set, so the Hub cannot be reached",
                          hint="unset HF_HUB_OFFLINE")
    if status == 401:
        return BuildError(f"{what}: authentication failed (HTTP 401): the Hugging Face token is "
                          "missing, invalid or expired",
                          hint="set HF_TOKEN to a valid write token or run `hf auth login`")
    if status == 403:
        return BuildError(f"{what}: permission denied (HTTP 403)"
                          + (f": {server}" if server else ""),
                          hint=f"the token needs write access to the `{org}` namespace")
    if status == 404:
        return BuildError(f"{what}: not found (HTTP 404)" + (f": {server}" if server else ""),
                          hint=f"check the repo id `{repo_id}` and that `{org}` exists")
    if status == 412:
        return BuildError(f"{what}: the branch moved while uploading (HTTP 412); nothing was "
                          "committed", hint="someone else pushed at the same time; run it again")
    if status is not None:
        return BuildError(f"{what}: the Hub answered HTTP {status}"
                          + (f": {server}" if server else ""),
                          hint="nothing was committed; run it again to finish")
    if isinstance(exc, _transport_errors()):
        return BuildError(f"{what}: cannot reach {endpoint} ({type(exc).__name__})",
                          hint="check the network or HF_ENDPOINT; nothing was committed, "
                               "run it again to finish")
    detail = scrub(str(exc)).strip().splitlines()
    return BuildError(f"{what}: {type(exc).__name__}" + (f": {detail[0]}" if detail else ""))


class _Hub:
    """HfApi calls with retry-on-transient and one-line errors."""

    def __init__(self, repo_id: str, *, endpoint: str | None, token: str | None, log: Log,
                 retries: int, backoff: float):
        from huggingface_hub import HfApi
        self.api = HfApi(endpoint=endpoint, token=token)
        self.endpoint = self.api.endpoint.rstrip("/")
        self.repo_id = repo_id
        self.log = log
        self.retries = retries
        self.backoff = backoff
        self.scrub = _Scrub(token or self._token())

    @staticmethod
    def _token() -> str | None:
        from huggingface_hub import get_token
        try:
            return get_token()
        except Exception:
            return None

    def call(self, what: str, fn: Callable[[], Any]) -> Any:
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except BuildError:
                raise
            except Exception as exc:
                if is_transient(exc) and attempt < self.retries:
                    delay = self.backoff * 2 ** attempt
                    reason = f"HTTP {_status(exc)}" if _status(exc) else type(exc).__name__
                    self.log(f"{what}: {reason}; retrying in {delay:.1f}s "
                             f"({attempt + 1}/{self.retries})")
                    time.sleep(delay)
                    continue
                raise hub_error(exc, what=what, repo_id=self.repo_id, endpoint=self.endpoint,
                                scrub=self.scrub) from None
        raise AssertionError("unreachable")

    # -- reads ---------------------------------------------------------------------------

    def exists(self) -> bool:
        from huggingface_hub.errors import RepositoryNotFoundError

        def probe() -> bool:
            try:
                self.api.repo_info(self.repo_id, repo_type=REPO_TYPE)
                return True
            except RepositoryNotFoundError as exc:
                if _status(exc) in (401, 403):
                    raise
                return False
        return self.call(f"reading {self.repo_id}", probe)

    def branches(self) -> dict[str, str]:
        refs = self.api.list_repo_refs(self.repo_id, repo_type=REPO_TYPE)
        return {b.name: b.target_commit for b in refs.branches}

    def tags(self) -> dict[str, str]:
        refs = self.api.list_repo_refs(self.repo_id, repo_type=REPO_TYPE)
        return {t.name: t.target_commit for t in refs.tags}

    def tree(self, revision: str, paths: list[str]) -> dict[str, str]:
        """{path: blob oid} of every file under the folders `paths` at `revision`."""
        from huggingface_hub import RepoFile
        from huggingface_hub.errors import EntryNotFoundError
        out: dict[str, str] = {}
        for top in paths:
            try:
                entries = list(self.api.list_repo_tree(self.repo_id, path_in_repo=top,
                                                       recursive=True, revision=revision,
                                                       repo_type=REPO_TYPE))
            except EntryNotFoundError:
                continue
            out.update({e.path: e.blob_id for e in entries if isinstance(e, RepoFile)})
        return out

    def file_oids(self, revision: str, paths: list[str]) -> dict[str, str]:
        from huggingface_hub import RepoFile
        infos = self.api.get_paths_info(self.repo_id, paths, revision=revision, repo_type=REPO_TYPE)
        return {i.path: i.blob_id for i in infos if isinstance(i, RepoFile)}


# ----------------------------------------------------------------------------- syncing a branch


def compute_diff(local: dict[str, str], remote: dict[str, str], delete_under: list[str]) -> Diff:
    d = Diff()
    for path, oid in sorted(local.items()):
        if path not in remote:
            d.added.append(path)
        elif remote[path] != oid:
            d.changed.append(path)
        else:
            d.unchanged.append(path)
    d.deleted = sorted(p for p in remote if p not in local
                       and any(p.startswith(prefix) for prefix in delete_under))
    return d


@dataclass
class _Sync:
    diff: Diff
    commit: str | None  # new commit (or the landed one), None when nothing was committed
    head: str | None  # the branch head the diff was computed against
    commit_url: str | None = None
    pr_url: str | None = None


def _sync_branch(hub: _Hub, *, branch: str, local: dict[str, Path | bytes], dirs: list[str],
                 files: list[str], delete_under: list[str], message: str, description: str,
                 create_pr: bool, dry_run: bool) -> _Sync:
    """Bring `branch` to `local` in one commit (or a PR): remote state is read from the
    folders `dirs` (recursively) and the single `files`; stale files are deleted only under
    the `delete_under` prefixes."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    oids = {p: git_blob_oid(src) if isinstance(src, Path) else _bytes_oid(src)
            for p, src in local.items()}
    what = f"upload to {hub.repo_id}@{branch}"
    state: dict[str, Any] = {"first_head": None, "first_diff": None}

    def attempt() -> _Sync:
        head = hub.branches().get(branch)
        if head is None:
            if not dry_run:
                raise BuildError(f"{what}: branch {branch} disappeared during the upload",
                                 hint="run it again")
            return _Sync(compute_diff(oids, {}, delete_under), None, None)
        remote = hub.tree(head, dirs)
        if files:
            remote.update(hub.file_oids(head, files))
        diff = compute_diff(oids, remote, delete_under)
        first = state["first_head"]
        if first is None:
            state.update(first_head=head, first_diff=diff)
        if diff.empty or dry_run:
            # An earlier attempt whose answer was lost may have landed: then the head moved
            # and nothing is left to do; report that commit and what it changed.
            if diff.empty and first is not None and head != first and not create_pr:
                return _Sync(state["first_diff"], head, head)
            return _Sync(diff, None, head)
        ops: list[Any] = []
        for p in diff.added + diff.changed:
            src = local[p]
            ops.append(CommitOperationAdd(path_in_repo=p,
                                          path_or_fileobj=str(src) if isinstance(src, Path) else src))
        ops += [CommitOperationDelete(path_in_repo=p) for p in diff.deleted]
        info = hub.api.create_commit(hub.repo_id, ops, commit_message=message,
                                     commit_description=description, repo_type=REPO_TYPE,
                                     revision=branch, create_pr=create_pr, parent_commit=head)
        return _Sync(diff, info.oid, head, info.commit_url, info.pr_url)

    return hub.call(what, attempt)


# ----------------------------------------------------------------------------- upload


def _check_tag(tag: str, version: int) -> None:
    m = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", tag)
    if not m:
        raise BuildError(f"--tag {tag!r} is not a full release tag like v{version}.0.0")
    if int(m[1]) != version:
        raise BuildError(f"--tag {tag} does not belong to version {version} (branch v{version})",
                         hint=f"use v{version}.<minor>.<patch>, or bump general.version")


def upload(project: Path, *, repo_id: str | None = None, build_dir: Path | None = None,
           tag: str | None = None, create_pr: bool = False, dry_run: bool = False,
           allow_dirty: bool = False, private: bool = False, load: bool = True,
           python: str | None = None, endpoint: str | None = None, token: str | None = None,
           retries: int = 4, backoff: float = 0.5, log: Log = print, warn: Log = print,
           output_json: Path | None = None) -> UploadResult:
    project = project.resolve()
    manifest = manifest_mod.load(project, warn=warn)
    general = manifest.general
    repo_id = repo_id or general.hub.repo_id
    if not repo_id:
        raise BuildError("no repo id to upload to", file=project / manifest_mod.MANIFEST,
                         key="general.hub.repo-id", hint="set it in build.toml or pass --repo-id")
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo_id):
        raise BuildError(f"repo id {repo_id!r} is not of the form org/name", key="--repo-id")
    if tag is not None:
        _check_tag(tag, general.version)
        if create_pr:
            raise BuildError("--tag cannot be combined with --create-pr",
                             hint="merge the pull request, then tag the merge commit")
    if not dry_run and not (token or _Hub._token()):
        raise BuildError("no Hugging Face token", hint="set HF_TOKEN or run `hf auth login`")
    branch = general.hub.branch or f"v{general.version}"
    build_dir = (build_dir or project / "build").resolve()

    variants, skipped = select_variants(project, build_dir, manifest, allow_dirty=allow_dirty,
                                        load=load, python=python, log=log, warn=warn)
    to_upload = version_files(project, variants)
    readme, readme_source = card_text(project, manifest, repo_id, variants)
    if len(to_upload) > MAX_OPERATIONS:
        log(f"note: {len(to_upload)} files in one commit (the reference uploader batches by "
            f"{MAX_OPERATIONS}); one commit keeps the upload atomic")

    hub = _Hub(repo_id, endpoint=endpoint, token=token, log=warn, retries=retries, backoff=backoff)

    names = ", ".join(v.name for v in variants)
    message = f"Upload {general.name} version {general.version} ({names})"
    description = _commit_description(variants)
    delete_under = [f"build/{v.name}/" for v in variants]

    version_branch = dict(local=to_upload, dirs=["build", "benchmarks"], files=[],
                          delete_under=delete_under, message=message, description=description)
    main_branch = dict(local={README: readme.encode()}, dirs=[], files=[README], delete_under=[],
                       message=f"Update README.md ({readme_source})", description="")
    exists = hub.exists()
    branch_exists = exists and branch in hub.call("reading refs", hub.branches)
    if dry_run:
        nothing = _Sync(compute_diff({p: git_blob_oid(f) for p, f in to_upload.items()}, {},
                                     delete_under), None, None)
        sync = (_sync_branch(hub, branch=branch, create_pr=False, dry_run=True, **version_branch)
                if branch_exists else nothing)
        readme_sync = (_sync_branch(hub, branch=MAIN, create_pr=False, dry_run=True, **main_branch)
                       if exists else _Sync(Diff(added=[README]), None, None))
        _print_plan(log, repo_id, branch, sync.diff, readme_sync.diff, exists, branch_exists,
                    create_pr, tag)
        result = _result("dry-run", hub, repo_id, branch, sync, variants, skipped,
                         _readme_json(readme_sync, readme_source), tag)
        _write_json(output_json, result)
        return result

    if not exists:
        hub.call(f"creating {repo_id}", lambda: hub.api.create_repo(
            repo_id, repo_type=REPO_TYPE, private=private, exist_ok=True))
        log(f"created kernel repo {repo_id}" + (" (private)" if private else ""))
    if not branch_exists:
        hub.call(f"creating branch {branch}", lambda: hub.api.create_branch(
            repo_id, branch=branch, revision=MAIN, repo_type=REPO_TYPE, exist_ok=True))
        log(f"created branch {branch} from {MAIN}")

    sync = _sync_branch(hub, branch=branch, create_pr=create_pr, dry_run=False, **version_branch)
    readme_sync = _sync_branch(hub, branch=MAIN, create_pr=create_pr, dry_run=False, **main_branch)
    if create_pr:
        status = "pr-opened" if sync.pr_url else "unchanged"
    else:
        status = "uploaded" if sync.commit else "unchanged"

    tagged = None
    if tag is not None:
        target = sync.commit or sync.head
        _tag(hub, tag, target)  # type: ignore[arg-type]
        tagged = tag

    diff = sync.diff
    if create_pr and sync.pr_url:
        log(f"opened pull request {sync.pr_url} against {branch}: {len(diff.added)} added, "
            f"{len(diff.changed)} changed, {len(diff.deleted)} deleted")
    elif sync.commit:
        log(f"uploaded {names} to {repo_id}@{branch}: {len(diff.added)} added, "
            f"{len(diff.changed)} changed, {len(diff.deleted)} deleted, "
            f"{len(diff.unchanged)} unchanged -> {sync.commit_url or sync.commit}")
    else:
        log(f"{repo_id}@{branch} is up to date ({len(diff.unchanged)} files); no commit")
    if readme_sync.pr_url:
        log(f"opened pull request {readme_sync.pr_url} for README.md on {MAIN}")
    elif readme_sync.commit:
        log(f"updated README.md on {MAIN} ({readme_source})")
    if tagged:
        log(f"tagged {(sync.commit or sync.head or '')[:12]} as {tagged}")
    result = _result(status, hub, repo_id, branch, sync, variants, skipped,
                     _readme_json(readme_sync, readme_source), tagged)
    _write_json(output_json, result)
    return result


def _commit_description(variants: list[Variant]) -> str:
    lines = ["Uploaded with pixi-kernel-builder."]
    for v in variants:
        prov = v.meta.get("provenance") or {}
        kernel = prov.get("kernel") or {}
        src = f" from {kernel['commit']}" + (" (dirty)" if kernel.get("dirty") else "") \
            if kernel.get("commit") else ""
        lines.append(f"- {v.name}: {v.meta.get('id')}{src}")
    return "\n".join(lines)


def _tag(hub: _Hub, tag: str, target: str) -> None:
    existing = hub.call("reading tags", hub.tags)
    if tag in existing:
        if existing[tag] == target:
            return
        raise BuildError(f"tag {tag} already exists on {hub.repo_id} at {existing[tag][:12]}",
                         hint="release tags are never moved; pick the next version number")
    hub.call(f"tagging {tag}", lambda: hub.api.create_tag(
        hub.repo_id, tag=tag, revision=target, repo_type=REPO_TYPE, exist_ok=False))


def _readme_json(sync: _Sync, source: str) -> dict[str, Any]:
    d = sync.diff
    state = "added" if d.added else "changed" if d.changed else "unchanged"
    return {"source": source, "state": state, "commit": sync.commit, "pr_url": sync.pr_url}


def _result(status: str, hub: _Hub, repo_id: str, branch: str, sync: _Sync,
            variants: list[Variant], skipped: dict[str, list[str]], readme: dict[str, Any],
            tag: str | None) -> UploadResult:
    d = sync.diff
    url = sync.commit_url or f"{hub.endpoint}/kernels/{repo_id}/tree/{branch}"
    return UploadResult(status=status, repo_id=repo_id, branch=branch, commit=sync.commit, url=url,
                        pr_url=sync.pr_url, added=d.added,
                        changed=d.changed, deleted=d.deleted, unchanged=d.unchanged,
                        variants=[v.name for v in variants], skipped=skipped, readme=readme, tag=tag)


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
    if not branch_exists:
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


# ----------------------------------------------------------------------------- to-wheel


def download_build(repo_id: str, version: int, *, endpoint: str | None = None,
                   token: str | None = None, cache_dir: Path | None = None) -> Path:
    """snapshot_download of `build/*` at branch v<version>; returns the local build folder."""
    hub = _Hub(repo_id, endpoint=endpoint, token=token, log=_silent, retries=2, backoff=0.5)
    from huggingface_hub.errors import RevisionNotFoundError

    def fetch() -> str:
        from huggingface_hub.utils import (are_progress_bars_disabled, disable_progress_bars,
                                           enable_progress_bars)
        was_disabled = are_progress_bars_disabled()
        disable_progress_bars()
        try:
            return hub.api.snapshot_download(repo_id, repo_type=REPO_TYPE, revision=f"v{version}",
                                             allow_patterns=["build/*"], cache_dir=cache_dir)
        except RevisionNotFoundError:
            raise BuildError(f"{repo_id} has no version {version} (branch v{version})",
                             hint=f"list the versions with `kernels versions {repo_id}`") from None
        finally:
            if not was_disabled:
                enable_progress_bars()
    root = Path(hub.call(f"downloading {repo_id}@v{version}", fetch)) / "build"
    if not root.is_dir():
        raise BuildError(f"{repo_id}@v{version} has no build/ folder")
    return root


def to_wheels(source: Path | None, *, out: Path, repo_id: str | None = None,
              version: int | None = None, endpoint: str | None = None,
              log: Log = print, warn: Log = print) -> list[Path]:
    from .wheel import build_wheel, kernel_depends_note
    if repo_id is not None:
        if version is None:
            raise BuildError("--repo-id needs --version", hint="e.g. --version 1 for branch v1")
        build_root = download_build(repo_id, version, endpoint=endpoint)
        variants = variant_dirs(build_root)
    else:
        if version is not None:
            raise BuildError("--version only applies with --repo-id")
        source = (source or Path(".")).resolve()
        if (source / METADATA).is_file():
            variants = [source]
        else:
            build_root = source / "build" if (source / manifest_mod.MANIFEST).is_file() else source
            if not build_root.is_dir():
                raise BuildError("no build folder", file=build_root, hint="run `kbuild build` first")
            variants = variant_dirs(build_root)
    if not variants:
        raise BuildError("no variants to package", hint="run `kbuild build` first")
    wheels = []
    failures: list[BuildError] = []
    for v in variants:
        try:
            path = build_wheel(v, out)
        except BuildError as e:  # a broken variant is reported, the others still packaged
            failures.append(e)
            warn(f"skipping {v.name}: {e}")
            continue
        note = kernel_depends_note(v)
        if note:
            warn(note)
        log(f"{v.name} -> {path}")
        wheels.append(path)
    if not wheels:
        raise failures[0]
    return wheels
