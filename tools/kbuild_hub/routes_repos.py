"""Route handlers: account, organisations, repo creation and settings, repo info, refs, and
the read-only listings (tree, paths-info, commits)."""

from __future__ import annotations

import hashlib
import re
import time
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode

from .model import (
    COMMITS_PAGE_SIZE,
    DEFAULT_BRANCH,
    GITATTRIBUTES,
    NAME_RE,
    TREE_EXPAND_PAGE_SIZE,
    TREE_PAGE_SIZE,
    URL_PREFIX,
    HubError,
    Repo,
    git_blob_oid,
    iso,
    not_found,
)
from .store import Store
from .wire import Request, Response, json_response


class RepoRoutes(Store):
    # -- handlers: account, orgs, repos ------------------------------------------------

    def _whoami(self, req: Request) -> Response:
        given = req.bearer()
        if given is None or (self.token is not None and given not in (self.token, self.read_token)):
            raise HubError(401, "Invalid credentials in Authorization header")
        role = "read" if self.token is not None and given == self.read_token else "write"
        with self._lock:
            orgs = sorted({ns for (_, rid) in self._repos for ns in [rid.split("/")[0]] if ns != self.user})
        return json_response({
            "type": "user",
            "id": hashlib.sha1(self.user.encode()).hexdigest()[:24],
            "name": self.user,
            "fullname": self.user,
            "email": f"{self.user}@example.invalid",
            "emailVerified": True,
            "isPro": False,
            "avatarUrl": "",
            "orgs": [{"type": "org", "name": org, "fullname": org, "roleInOrg": "admin"} for org in orgs],
            "auth": {"type": "access_token", "accessToken": {"displayName": "test", "role": role}},
        })

    def _agent_harnesses(self, req: Request) -> Response:
        # huggingface_hub >= 2.4 fetches this registry (for progress-bar defaults): none registered here.
        return json_response({"standardEnvVars": [], "harnesses": {}})

    def _org_overview(self, req: Request, org: str) -> Response:
        org = unquote(org)
        with self._lock:
            known = any(repo.namespace == org for repo in self._repos.values())
        if not known or org == self.user:
            raise HubError(404, f"Organization {org} not found")
        return json_response({
            "name": org,
            "fullname": org,
            "avatarUrl": "",
            "isVerified": False,
            "isFollowing": False,
            "numUsers": 1,
            "numModels": 0,
            "numSpaces": 0,
            "numDatasets": 0,
            "numFollowers": 0,
            "trustedKernelPublisher": bool(self.trusted_publisher),
        })

    def _create_repo(self, req: Request) -> Response:
        body = req.json()
        name, org = body.get("name"), body.get("organization") or self.user
        repo_type = body.get("type") or "model"
        if repo_type not in URL_PREFIX:
            raise HubError(400, f"Invalid repo type: {repo_type!r}")
        if not isinstance(name, str) or not NAME_RE.fullmatch(name) or not NAME_RE.fullmatch(org) or ".." in name:
            raise HubError(400, f"Invalid repo name: {name!r}")
        if repo_type == "space" and not body.get("sdk"):
            raise HubError(400, "Spaces need an sdk")
        private = bool(body.get("private")) or body.get("visibility") in ("private", "protected")
        repo_id = f"{org}/{name}"
        url = f"{req.base_url}/{URL_PREFIX[repo_type]}{repo_id}"
        with self._lock:
            if (repo_type, repo_id) in self._repos:
                raise HubError(409, f"You already created this {repo_type} repo", url=url)
            repo = Repo(type=repo_type, id=repo_id, private=private, created_at=iso(time.time()))
            self._blobs[git_blob_oid(GITATTRIBUTES)] = GITATTRIBUTES
            first = self._new_commit(
                repo, [], {".gitattributes": git_blob_oid(GITATTRIBUTES)}, "initial commit", "", "system"
            )
            repo.branches[DEFAULT_BRANCH] = first.oid
            self._repos[(repo_type, repo_id)] = repo
            self._save()
        return json_response({"url": url, "name": repo_id, "id": repo_id})

    def _delete_repo(self, req: Request) -> Response:
        body = req.json()
        org = body.get("organization") or self.user
        key = (body.get("type") or "model", f"{org}/{body.get('name')}")
        with self._lock:
            if key not in self._repos:
                raise not_found("RepoNotFound", key[1])
            del self._repos[key]
            self._save()
        return json_response({})

    def _settings(self, req: Request, plural: str, ns: str, name: str) -> Response:
        body = req.json()
        with self._lock:
            repo = self._repo(req, plural, ns, name)
            if "private" in body:
                repo.private = bool(body["private"])
            if "visibility" in body:
                repo.private = body["visibility"] in ("private", "protected")
            if "gated" in body:
                repo.gated = body["gated"]
            self._save()
        return json_response({})

    def _validate_yaml(self, req: Request) -> Response:
        # No YAML parser in the stdlib: only check that a front matter block is closed.
        content = str(req.json().get("content") or "")
        if content.startswith("---") and not re.search(r"^---\s*$", content[3:], re.MULTILINE):
            raise HubError(400, "Invalid metadata: unterminated YAML front matter")
        return json_response({"errors": [], "warnings": []})

    def _repo_info(self, req: Request, plural: str, ns: str, name: str, rev: str | None = None) -> Response:
        with self._lock:
            repo = self._repo(req, plural, ns, name)
            rev_name = self._split_rev(rev)[0] if rev is not None else DEFAULT_BRANCH
            commit = repo.commits[self._resolve_rev(repo, rev_name)]
            info: dict[str, Any] = {
                "_id": hashlib.sha1(f"{repo.type}/{repo.id}".encode()).hexdigest()[:24],
                "id": repo.id,
                "author": repo.namespace,
                "sha": commit.oid,
                "private": repo.private,
                "gated": repo.gated,
                "disabled": False,
                "lastModified": commit.date,
                "createdAt": repo.created_at,
                "likes": 0,
                "downloads": 0,
                "tags": [],
            }
            if repo.type == "model":
                info["modelId"] = repo.id
            if repo.type != "kernel":  # huggingface_hub chokes on `siblings` for kernels
                blobs = req.flag("blobs")
                info["siblings"] = [
                    {"rfilename": p, **({"size": len(self._blobs[o]), "blobId": o} if blobs else {})}
                    for p, o in sorted(commit.files.items())
                ]
        return json_response(info)

    def _refs(self, req: Request, plural: str, ns: str, name: str) -> Response:
        with self._lock:
            repo = self._repo(req, plural, ns, name)
            data: dict[str, Any] = {
                "branches": [
                    {"name": b, "ref": f"refs/heads/{b}", "targetCommit": oid}
                    for b, oid in sorted(repo.branches.items(), key=lambda kv: (kv[0] != DEFAULT_BRANCH, kv[0]))
                ],
                "tags": [
                    {"name": t, "ref": f"refs/tags/{t}", "targetCommit": oid} for t, oid in sorted(repo.tags.items())
                ],
                "converts": [],
            }
            if req.flag("include_prs"):
                data["pullRequests"] = [
                    {"name": f"refs/pr/{n}", "ref": f"refs/pr/{n}", "targetCommit": oid}
                    for n, oid in sorted(repo.pr_refs.items())
                ]
        return json_response(data)

    # -- handlers: listing -----------------------------------------------------------

    def _page(self, req: Request, items: list, size: int) -> Response:
        """One page of `items` (`?p=N`), with a Link header to the next one."""
        page = req.page()
        chunk = items[page * size : (page + 1) * size]
        headers = {}
        if (page + 1) * size < len(items):
            query = {k: v[-1] for k, v in req.query.items()}
            query["p"] = str(page + 1)
            headers["Link"] = f'<{req.base_url}{req.path}?{urlencode(query)}>; rel="next"'
        return json_response(chunk, headers=headers)

    def _tree(self, req: Request, plural: str, ns: str, name: str, rest: str) -> Response:
        rev, path = self._split_rev(rest)
        recursive = req.flag("recursive")
        expand = req.flag("expand")
        with self._lock:
            repo = self._repo(req, plural, ns, name)
            commit = repo.commits[self._resolve_rev(repo, rev)]
            trees = self._trees_of(commit)
            if path and path not in trees:
                raise not_found("EntryNotFound", path, headers={"X-Repo-Commit": commit.oid})
            prefix = f"{path}/" if path else ""
            entries = []
            for candidates, is_dir in ((trees, True), (commit.files, False)):
                for p in candidates:
                    if p and p.startswith(prefix) and (recursive or "/" not in p[len(prefix):]):
                        entries.append(self._entry(commit, p, is_dir, repo if expand else None))
            entries.sort(key=lambda e: e["path"])
        return self._page(req, entries, TREE_EXPAND_PAGE_SIZE if expand else TREE_PAGE_SIZE)

    def _paths_info(self, req: Request, plural: str, ns: str, name: str, rest: str) -> Response:
        rev, _ = self._split_rev(rest)
        form = parse_qs(req.body.decode(), keep_blank_values=True)
        if req.headers.get("Content-Type", "").startswith("application/json"):
            data = req.json()
            form = {"paths": data.get("paths", []), "expand": [str(data.get("expand", False))]}
        expand = (form.get("expand") or ["false"])[-1].lower() == "true"
        with self._lock:
            repo = self._repo(req, plural, ns, name)
            commit = repo.commits[self._resolve_rev(repo, rev)]
            trees = self._trees_of(commit)
            out = []
            for p in form.get("paths", []):
                p = p.strip("/")
                if p in commit.files:
                    out.append(self._entry(commit, p, False, repo if expand else None))
                elif p and p in trees:
                    out.append(self._entry(commit, p, True, repo if expand else None))
        return json_response(out)

    def _commits(self, req: Request, plural: str, ns: str, name: str, rest: str) -> Response:
        rev, _ = self._split_rev(rest)
        formatted = "formatted" in req.query.get("expand[]", [])
        with self._lock:
            repo = self._repo(req, plural, ns, name)
            history = repo.history(self._resolve_rev(repo, rev))
        items = []
        for c in history:
            item = {"id": c.oid, "title": c.title, "message": c.message, "date": c.date,
                    "authors": [{"user": c.author, "avatar": ""}]}
            if formatted:
                item["formatted"] = {"title": c.title, "message": c.message}
            items.append(item)
        return self._page(req, items, COMMITS_PAGE_SIZE)
