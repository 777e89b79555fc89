"""Route handlers: discussions and pull requests (open, comment, close, merge), and file
downloads (`resolve`, with ranges)."""

from __future__ import annotations

import difflib
import re
import secrets
import time

from .model import (
    DEFAULT_BRANCH,
    DISCUSSIONS_PAGE_SIZE,
    Discussion,
    HubError,
    Repo,
    iso,
    not_found,
)
from .store import Store
from .wire import Request, Response, json_response


class DiscussionRoutes(Store):
    # -- handlers: discussions and pull requests ----------------------------------------

    def _event(self, kind: str, data: dict) -> dict:
        return {"id": secrets.token_hex(12), "type": kind, "createdAt": iso(time.time()),
                "author": {"name": self.user}, "data": data}

    def _comment_event(self, text: str) -> dict:
        now = iso(time.time())
        latest = {"raw": text, "html": text, "updatedAt": now, "author": {"name": self.user}}
        return self._event("comment", {"edited": False, "hidden": False, "latest": latest,
                                       "numEdits": 0, "editors": [self.user], "history": [latest]})

    def _open_pr(self, repo: Repo, title: str, description: str, *, base: str | None, start: str | None,
                 status: str, is_pr: bool = True) -> int:
        num = max(repo.discussions, default=0) + 1
        repo.discussions[num] = Discussion(
            num=num, title=title, author=self.user, created_at=iso(time.time()), is_pull_request=is_pr,
            status=status, base=base, start=start, events=[self._comment_event(description or title)],
        )
        return num

    def _discussion_json(self, repo: Repo, d: Discussion) -> dict:
        return {"num": d.num, "title": d.title, "status": d.status, "author": {"name": d.author},
                "createdAt": d.created_at, "isPullRequest": d.is_pull_request,
                "repo": {"name": repo.id, "type": repo.type}}

    def _discussions(self, req: Request, plural: str, ns: str, name: str) -> Response:
        with self._lock:
            repo = self._repo(req, plural, ns, name)
            if req.method == "POST":
                body = req.json()
                title = str(body.get("title") or "").strip()
                if not title:
                    raise HubError(400, "A title is required")
                is_pr = bool(body.get("pullRequest"))
                head = repo.branches[DEFAULT_BRANCH] if is_pr else None
                # An API-opened PR starts as a draft at the head of main; its first commit opens it.
                num = self._open_pr(
                    repo, title, str(body.get("description") or ""), base=DEFAULT_BRANCH if is_pr else None,
                    start=head, status="draft" if is_pr else "open", is_pr=is_pr,
                )
                if is_pr:
                    repo.pr_refs[num] = head  # type: ignore[assignment]
                self._save()
                url = f"{self._repo_url(req, repo)}/discussions/{num}"
                return json_response({"num": num, "pullRequest": is_pr, "url": url})
            kind, status, author = req.arg("type", "all"), req.arg("status", "all"), req.arg("author")
            found = [
                d for d in sorted(repo.discussions.values(), key=lambda d: -d.num)
                if (kind == "all" or d.is_pull_request == (kind == "pull_request"))
                and (status == "all" or d.status == status or (status == "open" and d.status == "draft"))
                and (author is None or d.author == author)
            ]
            start = req.page() * DISCUSSIONS_PAGE_SIZE
            return json_response({
                "discussions": [self._discussion_json(repo, d) for d in found[start : start + DISCUSSIONS_PAGE_SIZE]],
                "count": len(found),
                "start": start,
                "numClosedDiscussions": sum(d.status != "open" for d in found),
            })

    def _diff(self, old: dict[str, str], new: dict[str, str]) -> str:
        out = []
        for path in sorted(set(old) | set(new)):
            a, b = old.get(path), new.get(path)
            if a == b:
                continue
            before, after = (self._blobs[a] if a else b""), (self._blobs[b] if b else b"")
            out.append(f"diff --git a/{path} b/{path}\n")
            try:
                lines = difflib.unified_diff(
                    before.decode().splitlines(True), after.decode().splitlines(True),
                    f"a/{path}" if a else "/dev/null", f"b/{path}" if b else "/dev/null")
                out.extend(lines)
            except UnicodeDecodeError:
                out.append(f"Binary files a/{path} and b/{path} differ\n")
        return "".join(out)

    def _discussion_details(self, req: Request, plural: str, ns: str, name: str, num: str) -> Response:
        with self._lock:
            repo = self._repo(req, plural, ns, name)
            d = repo.discussions.get(int(num))
            if d is None:
                raise HubError(404, f"Discussion {num} not found")
            data = {**self._discussion_json(repo, d), "events": d.events}
            if d.is_pull_request:
                data["changes"] = {"base": f"refs/heads/{d.base}"}
                if d.merge_commit:
                    data["changes"]["mergeCommitId"] = d.merge_commit
                data["filesWithConflicts"] = []
                if req.flag("diff"):
                    head = repo.commits[repo.pr_refs[d.num]]
                    data["diff"] = self._diff(repo.commits[d.start].files, head.files)  # type: ignore[index]
        return json_response(data)

    def _discussion_action(self, req: Request, plural: str, ns: str, name: str, num: str, action: str) -> Response:
        body = req.json()
        with self._lock:
            repo = self._repo(req, plural, ns, name)
            d = repo.discussions.get(int(num))
            if d is None:
                raise HubError(404, f"Discussion {num} not found")
            if action == "comment":
                event = self._comment_event(str(body.get("comment") or ""))
                d.events.append(event)
                self._save()
                return json_response({"newMessage": event})
            if action == "status":
                status = body.get("status")
                if status not in ("open", "closed") or d.status == "merged":
                    raise HubError(400, f"Cannot change status to {status!r}")
                d.status = status
                event = self._event("status-change", {"status": status})
                d.events.append(event)
                self._save()
                return json_response({"newStatus": event})
            return self._merge(repo, d)

    def _merge(self, repo: Repo, pr: Discussion) -> Response:
        """Three-way merge of refs/pr/N into its base branch (a merge commit)."""
        if not pr.is_pull_request or pr.status not in ("open", "draft"):
            raise HubError(400, "Only open pull requests can be merged")
        fork = repo.commits[pr.start].files  # type: ignore[index]
        head = repo.commits[repo.pr_refs[pr.num]]
        base_oid = repo.branches.get(pr.base or "")
        if base_oid is None:
            raise not_found("RevisionNotFound", pr.base or "")
        merged = dict(repo.commits[base_oid].files)
        for path in set(fork) | set(head.files):
            ours, theirs = fork.get(path), head.files.get(path)
            if ours == theirs:
                continue
            if merged.get(path) not in (ours, theirs):
                raise HubError(409, f"Merge conflict on {path}")
            if theirs is None:
                merged.pop(path, None)
            else:
                merged[path] = theirs
        commit = self._new_commit(repo, [base_oid, head.oid], merged, pr.title, f"Merge refs/pr/{pr.num}", self.user)
        repo.branches[pr.base] = commit.oid  # type: ignore[index]
        pr.status, pr.merge_commit = "merged", commit.oid
        pr.events.append(self._event("status-change", {"status": "merged"}))
        self._save()
        return json_response({})

    # -- handlers: file downloads ---------------------------------------------------------

    def _resolve(self, req: Request, prefix: str | None, ns: str, name: str, rest: str) -> Response:
        rev, path = self._split_rev(rest)
        with self._lock:
            repo = self._repo(req, prefix, ns, name)
            oid = self._resolve_rev(repo, rev)
            blob = repo.commits[oid].files.get(path)
            if blob is None:
                raise not_found("EntryNotFound", path, headers={"X-Repo-Commit": oid})
            data = self._blobs[blob]
        headers = {"X-Repo-Commit": oid, "ETag": f'"{blob}"', "Accept-Ranges": "bytes"}
        status, body = 200, data
        range_header = req.headers.get("Range")
        if range_header and req.method == "GET":
            span = self._parse_range(range_header, len(data))
            if span is None:
                raise HubError(416, "Range not satisfiable", headers={"Content-Range": f"bytes */{len(data)}"})
            first, last = span
            status, body = 206, data[first : last + 1]
            headers["Content-Range"] = f"bytes {first}-{last}/{len(data)}"
        return Response(status, body, headers, content_type="application/octet-stream")

    @staticmethod
    def _parse_range(header: str, size: int) -> tuple[int, int] | None:
        m = re.fullmatch(r"\s*bytes=(\d*)-(\d*)\s*", header)
        if not m or (not m[1] and not m[2]):
            return None
        if not m[1]:  # suffix: the last N bytes
            n = int(m[2])
            return (max(size - n, 0), size - 1) if n and size else None
        first = int(m[1])
        last = min(int(m[2]), size - 1) if m[2] else size - 1
        return (first, last) if first < size and first <= last else None

