"""Route handlers that change a repo's content or refs: preupload, commit, branch, tag."""

from __future__ import annotations

import base64
import json
from urllib.parse import unquote

from .model import (
    DEFAULT_BRANCH,
    HEX_RE,
    HubError,
    check_ref_name,
    clean_path,
    git_blob_oid,
    gitignore_matcher,
    not_found,
)
from .store import Store
from .wire import Request, Response, json_response


class WriteRoutes(Store):
    # -- handlers: uploads -------------------------------------------------------------

    def _preupload(self, req: Request, plural: str, ns: str, name: str, rest: str) -> Response:
        rev, _ = self._split_rev(rest)
        body = req.json()
        with self._lock:
            repo = self._repo(req, plural, ns, name)
            commit = repo.commits[self._resolve_rev(repo, rev)]
            gitignore = body.get("gitIgnore")
            if gitignore is None and ".gitignore" in commit.files:
                gitignore = self._blobs[commit.files[".gitignore"]].decode("utf-8", "replace")
            ignored = gitignore_matcher(gitignore or "")
            files = []
            for f in body.get("files") or []:
                path = clean_path(f.get("path") if isinstance(f, dict) else None)
                files.append({"path": path, "uploadMode": "regular", "shouldIgnore": ignored(path),
                              "oid": commit.files.get(path)})
        return json_response({"files": files, "commitOid": commit.oid})

    @staticmethod
    def _parse_commit_payload(body: bytes) -> tuple[dict, list[tuple[str, str, bytes | None]]]:
        """NDJSON commit payload -> (header, [(op, path, content)]), contents decoded."""
        header: dict | None = None
        ops: list[tuple[str, str, bytes | None]] = []
        for line in body.splitlines():
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                key, value = item["key"], item["value"]
                if not isinstance(value, dict):
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                raise HubError(400, "Invalid commit payload: each line must be {key, value: {...}}")
            if key == "header":
                header = value
            elif key == "file":
                encoding = value.get("encoding", "utf-8")
                try:
                    content = (base64.b64decode(value["content"], validate=True) if encoding == "base64"
                               else value["content"].encode())
                except (ValueError, KeyError, AttributeError):
                    raise HubError(400, f"Invalid content for {value.get('path')!r}")
                ops.append(("file", clean_path(value.get("path")), content))
            elif key == "deletedFile":
                ops.append(("deletedFile", clean_path(value.get("path")), None))
            elif key == "deletedFolder":
                ops.append(("deletedFolder", clean_path(str(value.get("path", "")).rstrip("/")), None))
            elif key == "lfsFile":
                raise HubError(400, "LFS files are not supported by this server (preupload answers 'regular')")
            else:
                raise HubError(400, f"Unknown commit operation: {key!r}")
        if header is None or not str(header.get("summary", "")).strip():
            raise HubError(400, "Commit header with a non-empty summary is required")
        return header, ops

    def _apply_ops(self, files: dict[str, str], ops: list[tuple[str, str, bytes | None]],
                   new_blobs: dict[str, bytes]) -> dict[str, str]:
        files = dict(files)
        for op, path, content in ops:
            if op == "file":
                oid = git_blob_oid(content)  # type: ignore[arg-type]
                new_blobs[oid] = content  # type: ignore[assignment]
                files[path] = oid
            elif op == "deletedFile":
                if path not in files:
                    raise HubError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
                del files[path]
            else:
                doomed = [p for p in files if p.startswith(path + "/")]
                if not doomed:
                    raise HubError(404, f"A folder with this name doesn't exist: {path}", "EntryNotFound")
                for p in doomed:
                    del files[p]
        for path in files:  # a path cannot be both a file and a directory
            for i in range(path.count("/")):
                parent = path.rsplit("/", i + 1)[0]
                if parent in files:
                    raise HubError(400, f"Path conflict: {parent!r} is a file and a directory")
        return files

    def _commit(self, req: Request, plural: str, ns: str, name: str, rest: str) -> Response:
        rev, _ = self._split_rev(rest)
        header, ops = self._parse_commit_payload(req.body)  # decoded outside the lock
        title, message = str(header["summary"]).strip(), str(header.get("description") or "")
        parent = header.get("parentCommit")
        if parent is not None and not (isinstance(parent, str) and HEX_RE.fullmatch(parent.lower())):
            raise HubError(400, f"Invalid parentCommit: {parent!r}")
        parent = parent.lower() if parent else None
        create_pr = req.flag("create_pr")
        with self._lock:
            repo = self._repo(req, plural, ns, name)
            target = repo.writable_ref(rev)
            if target is None:
                raise not_found("RevisionNotFound", rev)
            kind, ref = target
            head = repo.branches[ref] if kind == "branch" else repo.pr_refs[ref]
            if create_pr:
                if kind != "branch":
                    raise HubError(400, "A pull request must target a branch")
                start = head
                if parent is not None:  # the PR starts from parentCommit
                    start = repo.resolve(parent) or ""
                    if start not in repo.commits:
                        raise not_found("RevisionNotFound", parent)
            else:
                if parent is not None and not head.startswith(parent):
                    raise HubError(412, "A commit has happened since. Please refresh and try again.",
                                   headers={"X-Repo-Commit": head})
                start = head
            new_blobs: dict[str, bytes] = {}
            files = self._apply_ops(repo.commits[start].files, ops, new_blobs)
            # Checks passed: from here on, nothing can fail.
            self._blobs.update(new_blobs)
            commit = self._new_commit(repo, [start], files, title, message, self.user)
            event = self._event("commit", {"subject": title, "oid": commit.oid})
            pr_url = None
            if create_pr:
                num = self._open_pr(repo, title, message, base=ref, start=start, status="open")
                repo.pr_refs[num] = commit.oid
                repo.discussions[num].events.append(event)
                pr_url = f"{self._repo_url(req, repo)}/discussions/{num}"
            elif kind == "branch":
                repo.branches[ref] = commit.oid
            else:
                repo.pr_refs[ref] = commit.oid
                pr = repo.discussions[ref]
                pr.events.append(event)
                if pr.status == "draft":
                    pr.status = "open"
            self._save()
        return json_response({
            "success": True,
            "commitOid": commit.oid,
            "commitUrl": f"{self._repo_url(req, repo)}/commit/{commit.oid}",
            "hookOutput": "",
            "pullRequestUrl": pr_url,
        })

    # -- handlers: refs ------------------------------------------------------------------

    def _branch(self, req: Request, plural: str, ns: str, name: str, rest: str) -> Response:
        branch = unquote(rest)
        with self._lock:
            repo = self._repo(req, plural, ns, name)
            if req.method == "DELETE":
                branch = branch[len("refs/heads/"):] if branch.startswith("refs/heads/") else branch
                if branch not in repo.branches:
                    raise not_found("RevisionNotFound", branch)
                if branch == DEFAULT_BRANCH:
                    raise HubError(403, "Cannot delete the default branch")
                del repo.branches[branch]
            else:
                check_ref_name(branch, "branch")
                body = req.json()
                if branch in repo.branches:
                    raise HubError(409, f"Branch {branch} already exists")
                repo.branches[branch] = self._resolve_rev(repo, str(body.get("startingPoint") or DEFAULT_BRANCH))
            self._save()
        return json_response({})

    def _tag(self, req: Request, plural: str, ns: str, name: str, rest: str) -> Response:
        with self._lock:
            repo = self._repo(req, plural, ns, name)
            if req.method == "DELETE":
                tag = unquote(rest)
                tag = tag[len("refs/tags/"):] if tag.startswith("refs/tags/") else tag
                if tag not in repo.tags:
                    raise not_found("RevisionNotFound", tag)
                del repo.tags[tag]
            else:
                rev, _ = self._split_rev(rest)
                tag = req.json().get("tag")
                if not isinstance(tag, str):
                    raise HubError(400, "Missing tag name")
                check_ref_name(tag, "tag")
                oid = self._resolve_rev(repo, rev)
                if tag in repo.tags:
                    raise HubError(409, f"Tag {tag} already exists")
                repo.tags[tag] = oid
            self._save()
        return json_response({})

