"""A Hugging Face Hub-compatible HTTP server for tests (stdlib only).

The real `huggingface_hub` and `kernels` clients talk to it unchanged through
`HF_ENDPOINT` (or `HfApi(endpoint=...)`). It keeps git-like repositories in memory
(optionally persisted to a directory): commits with full file snapshots, branches,
tags and pull requests (`refs/pr/N`). Every file is a regular git blob, so the
clients never need Xet or LFS.

Endpoints and pitfalls: the project's shared spec, hub-api.md. Unknown routes answer 404
with a JSON error and are recorded in `HubServer.unknown_routes`.

    kbuild hub serve --port 8080 [--token T] [--data-dir D]     (or: python -m kbuild_hub ...)
"""

from __future__ import annotations

import argparse
import base64
import difflib
import hashlib
import json
import logging
import os
import re
import secrets
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatchcase
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, unquote, urlencode

log = logging.getLogger(__name__)

# URL plural -> repo type, and the URL prefix of each type's web/resolve routes.
PLURAL_TO_TYPE = {"models": "model", "datasets": "dataset", "spaces": "space", "kernels": "kernel"}
TYPE_TO_PLURAL = {v: k for k, v in PLURAL_TO_TYPE.items()}
URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/", "kernel": "kernels/"}
DEFAULT_BRANCH = "main"
WRITE_METHODS = ("POST", "PUT", "DELETE", "PATCH")
TREE_PAGE_SIZE = 1000
TREE_EXPAND_PAGE_SIZE = 50
COMMITS_PAGE_SIZE = 50
DISCUSSIONS_PAGE_SIZE = 50

# What the Hub puts in the initial commit of every new repo.
GITATTRIBUTES = b"""*.bin filter=lfs diff=lfs merge=lfs -text
*.ckpt filter=lfs diff=lfs merge=lfs -text
*.h5 filter=lfs diff=lfs merge=lfs -text
*.onnx filter=lfs diff=lfs merge=lfs -text
*.pt filter=lfs diff=lfs merge=lfs -text
*.pth filter=lfs diff=lfs merge=lfs -text
*.safetensors filter=lfs diff=lfs merge=lfs -text
*.tar.* filter=lfs diff=lfs merge=lfs -text
*.zip filter=lfs diff=lfs merge=lfs -text
"""

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_HEX_RE = re.compile(r"[0-9a-f]{5,40}")
_BAD_REF_RE = re.compile(r"(^[-/.])|(\.\.)|([\s~^:?*\[\\])|(/$)|(\.lock$)|(//)|(@\{)")


def git_blob_oid(data: bytes) -> str:
    """The git blob id of `data` (what the Hub sends as a file's oid / ETag)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % (int(t * 1000) % 1000)


class HubError(Exception):
    """An error answer: status, message, optional X-Error-Code and extra JSON fields."""

    def __init__(self, status: int, message: str, code: str | None = None, **extra: Any):
        super().__init__(message)
        self.status, self.message, self.code, self.extra = status, message, code, extra


def _not_found(kind: str, what: str, **extra: Any) -> HubError:
    messages = {
        "RepoNotFound": "Repository not found",
        "RevisionNotFound": f"Invalid rev id: {what}",
        "EntryNotFound": f"Entry not found: {what}",
    }
    return HubError(404, messages[kind], kind, **extra)


# ----------------------------------------------------------------------------- model


@dataclass
class Commit:
    oid: str
    parents: list[str]
    title: str
    message: str
    author: str
    date: str
    files: dict[str, str]  # path -> blob oid (full snapshot)


@dataclass
class Discussion:
    num: int
    title: str
    author: str
    created_at: str
    is_pull_request: bool
    status: str  # open | closed | merged | draft
    base: str | None = None  # target branch of a pull request
    start: str | None = None  # commit the PR started from
    merge_commit: str | None = None
    events: list[dict] = field(default_factory=list)


@dataclass
class Repo:
    type: str
    id: str
    private: bool
    created_at: str
    gated: Any = False
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    pr_refs: dict[int, str] = field(default_factory=dict)  # refs/pr/N -> commit
    discussions: dict[int, Discussion] = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        return self.id.split("/", 1)[0]

    def resolve(self, rev: str) -> str | None:
        """Commit id for a branch, tag, `refs/...` name, full or abbreviated commit id."""
        if rev in self.branches:
            return self.branches[rev]
        if rev in self.tags:
            return self.tags[rev]
        for prefix, table in (("refs/heads/", self.branches), ("refs/tags/", self.tags)):
            if rev.startswith(prefix):
                return table.get(rev[len(prefix):])
        if m := re.fullmatch(r"refs/pr/(\d+)", rev):
            return self.pr_refs.get(int(m[1]))
        if _HEX_RE.fullmatch(rev):
            if rev in self.commits:
                return rev
            if len(rev) >= 7:
                hits = [oid for oid in self.commits if oid.startswith(rev)]
                if len(hits) == 1:
                    return hits[0]
        return None

    def writable_ref(self, rev: str) -> tuple[str, Any] | None:
        """("branch", name) or ("pr", num) when `rev` names a ref a commit may move."""
        name = rev[len("refs/heads/"):] if rev.startswith("refs/heads/") else rev
        if name in self.branches:
            return "branch", name
        if (m := re.fullmatch(r"refs/pr/(\d+)", rev)) and int(m[1]) in self.pr_refs:
            return "pr", int(m[1])
        return None

    def history(self, oid: str) -> list[Commit]:
        """First-parent history from `oid`, newest first."""
        out = []
        while oid:
            commit = self.commits[oid]
            out.append(commit)
            oid = commit.parents[0] if commit.parents else ""
        return out


def _tree_oids(files: dict[str, str]) -> dict[str, str]:
    """Git tree ids of every directory ("" is the root) of a flat snapshot."""
    children: dict[str, dict[str, tuple[bool, str]]] = {"": {}}
    for path, oid in files.items():
        parts = path.split("/")
        for i in range(len(parts) - 1):
            parent, here = "/".join(parts[:i]), "/".join(parts[: i + 1])
            children.setdefault(here, {})
            children[parent][parts[i]] = (True, here)
        children["/".join(parts[:-1])][parts[-1]] = (False, oid)
    out: dict[str, str] = {}

    def visit(directory: str) -> str:
        entries = []
        for name, (is_dir, ref) in children[directory].items():
            if is_dir:
                entries.append((name + "/", b"40000 %s\0%s" % (name.encode(), bytes.fromhex(visit(ref)))))
            else:
                entries.append((name, b"100644 %s\0%s" % (name.encode(), bytes.fromhex(ref))))
        body = b"".join(raw for _, raw in sorted(entries))
        out[directory] = hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()
        return out[directory]

    visit("")
    return out


def _gitignore_matcher(text: str) -> Callable[[str], bool]:
    """A small .gitignore matcher: globs, `!` negation, trailing `/`, anchoring."""
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        line = line[1:] if negate else line
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        anchored = "/" in line
        rules.append((line.lstrip("/"), negate, dir_only, anchored))

    def ignored(path: str) -> bool:
        parts = path.split("/")
        result = False
        for pattern, negate, dir_only, anchored in rules:
            # Candidates: every directory on the path, and the file itself unless dir_only.
            last = len(parts) - 1 if dir_only else len(parts)
            for i in range(last):
                candidate = "/".join(parts[: i + 1]) if anchored else parts[i]
                if fnmatchcase(candidate, pattern) or (
                    pattern.startswith("**/") and fnmatchcase(candidate, pattern[3:])
                ):
                    result = not negate
                    break
        return result

    return ignored


def _clean_path(path: Any) -> str:
    if not isinstance(path, str):
        raise HubError(400, "Invalid path")
    parts = path.split("/")
    bad_part = any(p in ("", ".", "..") for p in parts) or parts[0] == ".git"
    if not path or path.startswith("/") or "\\" in path or bad_part:
        raise HubError(400, f"Invalid path: {path!r}")
    return path


def _check_ref_name(name: str, kind: str) -> None:
    if not name or name.startswith("refs/") or name == "HEAD" or _BAD_REF_RE.search(name):
        raise HubError(400, f"Invalid {kind} name: {name!r}")


# ----------------------------------------------------------------------------- HTTP plumbing


@dataclass
class Request:
    method: str
    target: str  # raw path + query, as sent
    path: str  # raw (still %-encoded) path
    query: dict[str, list[str]]
    headers: Any
    body: bytes
    base_url: str  # scheme://host the client used

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else default

    def flag(self, name: str) -> bool:
        return (self.arg(name) or "").lower() in ("1", "true", "yes")

    def json(self) -> dict:
        """The body as a JSON object ({} when empty); 400 otherwise."""
        if not self.body.strip():
            return {}
        try:
            data = json.loads(self.body)
        except ValueError:
            raise HubError(400, "Invalid JSON body")
        if not isinstance(data, dict):
            raise HubError(400, "The JSON body must be an object")
        return data

    def page(self) -> int:
        try:
            return max(int(self.arg("p", "0") or 0), 0)
        except ValueError:
            raise HubError(400, "Invalid page number")

    def bearer(self) -> str | None:
        value = self.headers.get("Authorization", "")
        return value[7:].strip() if value.lower().startswith("bearer ") else None


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


def _json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(status, json.dumps(data).encode(), dict(headers or {}))


def _error_response(err: HubError) -> Response:
    headers = {"X-Error-Message": err.message.encode("latin-1", "replace").decode("latin-1")}
    if err.code:
        headers["X-Error-Code"] = err.code
    headers.update(err.extra.pop("headers", {}))
    return _json_response({"error": err.message, **err.extra}, err.status, headers)


@dataclass
class _Fault:
    status: int | None
    drop: bool
    delay: float
    count: int
    methods: tuple[str, ...]
    path_contains: str


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kbuild-hubserver/1"
    timeout = 120  # idle keep-alive connections are closed after this

    def setup(self) -> None:
        super().setup()
        self.server.hub._connections.add(self.connection)  # type: ignore[attr-defined]

    def finish(self) -> None:
        self.server.hub._connections.discard(self.connection)  # type: ignore[attr-defined]
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._handle()

    do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_GET

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if len(body) != length:
            raise ConnectionError("short request body")
        return body

    def _handle(self) -> None:
        hub: HubServer = self.server.hub  # type: ignore[attr-defined]
        try:
            body = self._read_body()
        except ValueError:  # bad Content-Length or chunk size: answer, then hang up
            self.close_connection = True
            self._send(_error_response(HubError(400, "Malformed request body framing")))
            return
        except (ConnectionError, OSError):  # the client went away mid-body
            self.close_connection = True
            return
        fault = hub._take_fault(self.command, self.path)
        if fault is not None:
            if fault.delay:
                time.sleep(fault.delay)
            if fault.drop:
                hub.requests.append((self.command, self.path, 0))
                self.close_connection = True  # close without answering
                return
            if fault.status is not None:
                self._send(_error_response(HubError(fault.status, f"Injected fault ({fault.status})")))
                return
        path, _, query = self.path.partition("?")
        request = Request(
            method=self.command,
            target=self.path,
            path=path,
            query=parse_qs(query, keep_blank_values=True),
            headers=self.headers,
            body=body,
            base_url=f"http://{self.headers.get('Host') or hub.url.split('://', 1)[-1]}",
        )
        self._send(hub._dispatch(request))

    def _send(self, response: Response) -> None:
        hub: HubServer = self.server.hub  # type: ignore[attr-defined]
        hub.requests.append((self.command, self.path, response.status))
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        for key, value in response.headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(response.body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    hub: "HubServer"

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Route errors are answered in _dispatch; what lands here is a client hanging up mid-answer.
        log.debug("hubserver: connection from %s ended with an error", client_address, exc_info=True)


# ----------------------------------------------------------------------------- server


class HubServer:
    """Hub-compatible server on 127.0.0.1 (see module docstring).

    Switches that tests may flip at any time: `trusted_publisher` (the org overview's
    `trustedKernelPublisher`), `token` (when set, writes and private reads need
    `Authorization: Bearer <token>`), and `inject_faults(...)`.
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        trusted_publisher: bool = True,
        data_dir: Path | None = None,
        port: int = 0,
        user: str = "test-user",
    ):
        self.token = token
        self.trusted_publisher = trusted_publisher
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.port = port
        self.user = user
        self.url = ""
        self.requests: list[tuple[str, str, int]] = []  # (method, raw target, status); 0 = dropped
        self.unknown_routes: list[tuple[str, str]] = []
        self._lock = threading.RLock()
        self._repos: dict[tuple[str, str], Repo] = {}
        self._blobs: dict[str, bytes] = {}
        self._trees: dict[str, dict[str, str]] = {}  # commit -> directory tree ids
        self._saved_blobs: set[str] = set()
        self._faults: list[_Fault] = []
        self._connections: set[socket.socket] = set()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self._routes = self._build_routes()
        if self.data_dir is not None:
            self._load()

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> "HubServer":
        httpd = _Server(("127.0.0.1", self.port), _Handler)
        httpd.hub = self
        self._httpd = httpd
        self.url = f"http://127.0.0.1:{httpd.server_address[1]}"
        self._thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), name="hubserver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        for conn in list(self._connections):  # wake handlers blocked on keep-alive reads
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._httpd = None

    def __enter__(self) -> "HubServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- test helpers ------------------------------------------------------------

    def inject_faults(
        self,
        *,
        status: int | None = None,
        drop: bool = False,
        delay: float = 0.0,
        count: int = 1,
        methods: tuple[str, ...] = ("POST",),
        path_contains: str = "",
    ) -> None:
        """The next `count` matching requests answer `status`, are dropped, or wait `delay` first.

        Faults act before the request is routed, so nothing is applied.
        """
        fault = _Fault(status, drop, delay, count, tuple(m.upper() for m in methods), path_contains)
        with self._lock:
            self._faults.append(fault)

    def _take_fault(self, method: str, target: str) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.count > 0 and method in fault.methods and fault.path_contains in target:
                    fault.count -= 1
                    if fault.count == 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def repo_commits(self, repo_id: str, repo_type: str = "kernel", branch: str = "main") -> list[str]:
        """Commit ids reachable from `branch` (any revision) by first parents, newest first."""
        with self._lock:
            repo = self._repos[(repo_type, repo_id)]
            oid = repo.resolve(branch)
            if oid is None:
                raise KeyError(f"{repo_id}: unknown revision {branch!r}")
            return [c.oid for c in repo.history(oid)]

    def files(self, repo_id: str, repo_type: str = "kernel", revision: str = "main") -> dict[str, bytes]:
        """The full snapshot {path: bytes} of `revision`."""
        with self._lock:
            repo = self._repos[(repo_type, repo_id)]
            oid = repo.resolve(revision)
            if oid is None:
                raise KeyError(f"{repo_id}: unknown revision {revision!r}")
            return {path: self._blobs[blob] for path, blob in repo.commits[oid].files.items()}

    # -- routing -------------------------------------------------------------------

    def _build_routes(self) -> list[tuple[tuple[str, ...], re.Pattern, Callable[..., Response]]]:
        repo = r"/api/(models|datasets|spaces|kernels)/([^/]+)/([^/]+)"
        get = ("GET", "HEAD")
        table = [
            (get, r"/api/whoami-v2", self._whoami),
            (get, r"/api/agent-harnesses", self._agent_harnesses),
            (("POST",), r"/api/repos/create", self._create_repo),
            (("POST",), r"/api/repos/delete", self._delete_repo),
            (("POST",), r"/api/validate-yaml", self._validate_yaml),
            (get, r"/api/organizations/([^/]+)/overview", self._org_overview),
            (get, repo, self._repo_info),
            (get, repo + r"/revision/(.+)", self._repo_info),
            (get, repo + r"/refs", self._refs),
            (get, repo + r"/tree/(.+)", self._tree),
            (("POST",), repo + r"/paths-info/(.+)", self._paths_info),
            (get, repo + r"/commits/(.+)", self._commits),
            (("POST",), repo + r"/preupload/(.+)", self._preupload),
            (("POST",), repo + r"/commit/(.+)", self._commit),
            (("POST", "DELETE"), repo + r"/branch/(.+)", self._branch),
            (("POST", "DELETE"), repo + r"/tag/(.+)", self._tag),
            (("PUT",), repo + r"/settings", self._settings),
            (get + ("POST",), repo + r"/discussions", self._discussions),
            (get, repo + r"/discussions/(\d+)", self._discussion_details),
            (("POST",), repo + r"/discussions/(\d+)/(merge|status|comment)", self._discussion_action),
            (get, r"/(?:(datasets|spaces|kernels)/)?([^/]+)/([^/]+)/(?:resolve|raw)/(.+)", self._resolve),
        ]
        return [(methods, re.compile(pattern), handler) for methods, pattern, handler in table]

    # POST routes that only read (no write permission needed).
    _READ_ONLY_POSTS = ("/paths-info/", "/api/validate-yaml")

    def _dispatch(self, req: Request) -> Response:
        try:
            self._check_token(req)
            wrong_method = False
            for methods, pattern, handler in self._routes:
                m = pattern.fullmatch(req.path)
                if m and req.method in methods:
                    return handler(req, *m.groups())
                wrong_method = wrong_method or m is not None
            if wrong_method:
                raise HubError(405, f"Method {req.method} not allowed on {req.path}")
            self.unknown_routes.append((req.method, req.target))
            log.warning("hubserver: unknown route %s %s", req.method, req.target)
            return _error_response(HubError(404, f"Unknown route: {req.method} {req.path}"))
        except HubError as err:
            return _error_response(err)
        except Exception as exc:  # a server bug: answer 500, keep serving
            log.exception("hubserver: %s %s failed", req.method, req.target)
            return _error_response(HubError(500, f"Internal error: {exc!r}"))

    def _check_token(self, req: Request) -> None:
        if self.token is None:
            return
        given = req.bearer()
        if given is not None and given != self.token:
            raise HubError(401, "Invalid credentials in Authorization header")
        read_only = req.method in ("GET", "HEAD") or any(p in req.path for p in self._READ_ONLY_POSTS)
        if given is None and not read_only:
            raise HubError(401, "You must be authenticated to access this resource")

    def _authorized(self, req: Request) -> bool:
        return self.token is None or req.bearer() == self.token

    def _repo(self, req: Request, plural_or_type: str | None, ns: str, name: str) -> Repo:
        repo_type = PLURAL_TO_TYPE.get(plural_or_type or "models", plural_or_type or "model")
        repo = self._repos.get((repo_type, f"{unquote(ns)}/{unquote(name)}"))
        if repo is None:
            raise _not_found("RepoNotFound", f"{ns}/{name}")
        if repo.private and not self._authorized(req):
            raise HubError(401, "Repository not found", "RepoNotFound")
        return repo

    def _repo_url(self, req: Request, repo: Repo) -> str:
        return f"{req.base_url}/{URL_PREFIX[repo.type]}{repo.id}"

    @staticmethod
    def _split_rev(rest: str) -> tuple[str, str]:
        """Split `<rev>[/<path>]` (raw). The rev is one %2F-encoded segment, or an unencoded `refs/x/y`."""
        segments = rest.split("/")
        is_ref = len(segments) >= 3 and segments[0] == "refs" and segments[1] in ("heads", "tags", "pr", "convert")
        n = 3 if is_ref else 1
        rev = "/".join(unquote(s) for s in segments[:n])
        path = "/".join(unquote(s) for s in segments[n:])
        return rev, path.strip("/")

    def _resolve_rev(self, repo: Repo, rev: str) -> str:
        oid = repo.resolve(rev)
        if oid is None:
            raise _not_found("RevisionNotFound", rev)
        return oid

    # -- persistence -----------------------------------------------------------------

    def _save(self) -> None:
        """Write the store to data_dir (blobs once, then an atomic state.json). Call under the lock."""
        if self.data_dir is None:
            return
        blob_dir = self.data_dir / "blobs"
        blob_dir.mkdir(parents=True, exist_ok=True)
        for oid in self._blobs.keys() - self._saved_blobs:
            target = blob_dir / oid
            if not target.exists():
                tmp = target.with_suffix(".tmp")
                tmp.write_bytes(self._blobs[oid])
                os.replace(tmp, target)
            self._saved_blobs.add(oid)
        state = {"repos": []}
        for repo in self._repos.values():
            entry = asdict(repo)
            entry["pr_refs"] = {str(k): v for k, v in repo.pr_refs.items()}
            entry["discussions"] = {str(k): v for k, v in entry["discussions"].items()}
            state["repos"].append(entry)
        tmp = self.data_dir / "state.json.tmp"
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.data_dir / "state.json")

    def _load(self) -> None:
        state_file = self.data_dir / "state.json"  # type: ignore[operator]
        if not state_file.exists():
            return
        state = json.loads(state_file.read_text())
        for entry in state["repos"]:
            repo = Repo(
                type=entry["type"], id=entry["id"], private=entry["private"],
                created_at=entry["created_at"], gated=entry.get("gated", False),
            )
            repo.commits = {oid: Commit(**c) for oid, c in entry["commits"].items()}
            repo.branches, repo.tags = entry["branches"], entry["tags"]
            repo.pr_refs = {int(k): v for k, v in entry["pr_refs"].items()}
            repo.discussions = {int(k): Discussion(**d) for k, d in entry["discussions"].items()}
            self._repos[(repo.type, repo.id)] = repo
            for commit in repo.commits.values():
                for oid in commit.files.values():
                    if oid not in self._blobs:
                        self._blobs[oid] = (self.data_dir / "blobs" / oid).read_bytes()  # type: ignore[operator]
                        self._saved_blobs.add(oid)

    # -- store operations (call under the lock) ---------------------------------------

    def _new_commit(
        self, repo: Repo, parents: list[str], files: dict[str, str], title: str, message: str, author: str
    ) -> Commit:
        date = _iso(time.time())
        seed = "\n".join([*parents, *sorted(f"{p} {o}" for p, o in files.items()), author, date, title, message])
        oid = hashlib.sha1(f"{seed}\n{secrets.token_hex(8)}".encode()).hexdigest()
        commit = Commit(oid, parents, title, message, author, date, files)
        repo.commits[oid] = commit
        return commit

    def _trees_of(self, commit: Commit) -> dict[str, str]:
        trees = self._trees.get(commit.oid)
        if trees is None:
            trees = self._trees[commit.oid] = _tree_oids(commit.files)
        return trees

    def _entry(self, commit: Commit, path: str, is_dir: bool, repo: Repo | None = None) -> dict:
        """One tree / paths-info entry; with `repo`, also its last commit (expand)."""
        if is_dir:
            entry = {"type": "directory", "oid": self._trees_of(commit)[path], "size": 0, "path": path}
        else:
            oid = commit.files[path]
            entry = {"type": "file", "oid": oid, "size": len(self._blobs[oid]), "path": path}
        if repo is not None:
            last = self._last_change(repo, commit, path, is_dir)
            entry["lastCommit"] = {"id": last.oid, "title": last.title, "date": last.date}
        return entry

    def _last_change(self, repo: Repo, commit: Commit, path: str, is_dir: bool) -> Commit:
        def version(c: Commit) -> str | None:
            return self._trees_of(c).get(path) if is_dir else c.files.get(path)

        current = version(commit)
        last = commit
        for older in repo.history(commit.oid)[1:]:
            if version(older) != current:
                break
            last = older
        return last

    # -- handlers: account, orgs, repos ------------------------------------------------

    def _whoami(self, req: Request) -> Response:
        given = req.bearer()
        if given is None or (self.token is not None and given != self.token):
            raise HubError(401, "Invalid credentials in Authorization header")
        with self._lock:
            orgs = sorted({ns for (_, rid) in self._repos for ns in [rid.split("/")[0]] if ns != self.user})
        return _json_response({
            "type": "user",
            "id": hashlib.sha1(self.user.encode()).hexdigest()[:24],
            "name": self.user,
            "fullname": self.user,
            "email": f"{self.user}@example.invalid",
            "emailVerified": True,
            "isPro": False,
            "avatarUrl": "",
            "orgs": [{"type": "org", "name": org, "fullname": org, "roleInOrg": "admin"} for org in orgs],
            "auth": {"type": "access_token", "accessToken": {"displayName": "test", "role": "write"}},
        })

    def _agent_harnesses(self, req: Request) -> Response:
        # huggingface_hub >= 2.4 fetches this registry (for progress-bar defaults): none registered here.
        return _json_response({"standardEnvVars": [], "harnesses": {}})

    def _org_overview(self, req: Request, org: str) -> Response:
        org = unquote(org)
        with self._lock:
            known = any(repo.namespace == org for repo in self._repos.values())
        if not known or org == self.user:
            raise HubError(404, f"Organization {org} not found")
        return _json_response({
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
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or not _NAME_RE.fullmatch(org) or ".." in name:
            raise HubError(400, f"Invalid repo name: {name!r}")
        if repo_type == "space" and not body.get("sdk"):
            raise HubError(400, "Spaces need an sdk")
        private = bool(body.get("private")) or body.get("visibility") in ("private", "protected")
        repo_id = f"{org}/{name}"
        url = f"{req.base_url}/{URL_PREFIX[repo_type]}{repo_id}"
        with self._lock:
            if (repo_type, repo_id) in self._repos:
                raise HubError(409, f"You already created this {repo_type} repo", url=url)
            repo = Repo(type=repo_type, id=repo_id, private=private, created_at=_iso(time.time()))
            self._blobs[git_blob_oid(GITATTRIBUTES)] = GITATTRIBUTES
            first = self._new_commit(
                repo, [], {".gitattributes": git_blob_oid(GITATTRIBUTES)}, "initial commit", "", "system"
            )
            repo.branches[DEFAULT_BRANCH] = first.oid
            self._repos[(repo_type, repo_id)] = repo
            self._save()
        return _json_response({"url": url, "name": repo_id, "id": repo_id})

    def _delete_repo(self, req: Request) -> Response:
        body = req.json()
        org = body.get("organization") or self.user
        key = (body.get("type") or "model", f"{org}/{body.get('name')}")
        with self._lock:
            if key not in self._repos:
                raise _not_found("RepoNotFound", key[1])
            del self._repos[key]
            self._save()
        return _json_response({})

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
        return _json_response({})

    def _validate_yaml(self, req: Request) -> Response:
        # No YAML parser in the stdlib: only check that a front matter block is closed.
        content = str(req.json().get("content") or "")
        if content.startswith("---") and not re.search(r"^---\s*$", content[3:], re.MULTILINE):
            raise HubError(400, "Invalid metadata: unterminated YAML front matter")
        return _json_response({"errors": [], "warnings": []})

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
        return _json_response(info)

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
        return _json_response(data)

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
        return _json_response(chunk, headers=headers)

    def _tree(self, req: Request, plural: str, ns: str, name: str, rest: str) -> Response:
        rev, path = self._split_rev(rest)
        recursive = req.flag("recursive")
        expand = req.flag("expand")
        with self._lock:
            repo = self._repo(req, plural, ns, name)
            commit = repo.commits[self._resolve_rev(repo, rev)]
            trees = self._trees_of(commit)
            if path and path not in trees:
                raise _not_found("EntryNotFound", path, headers={"X-Repo-Commit": commit.oid})
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
        return _json_response(out)

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
            ignored = _gitignore_matcher(gitignore or "")
            files = []
            for f in body.get("files") or []:
                path = _clean_path(f.get("path") if isinstance(f, dict) else None)
                files.append({"path": path, "uploadMode": "regular", "shouldIgnore": ignored(path),
                              "oid": commit.files.get(path)})
        return _json_response({"files": files, "commitOid": commit.oid})

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
                ops.append(("file", _clean_path(value.get("path")), content))
            elif key == "deletedFile":
                ops.append(("deletedFile", _clean_path(value.get("path")), None))
            elif key == "deletedFolder":
                ops.append(("deletedFolder", _clean_path(str(value.get("path", "")).rstrip("/")), None))
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
        if parent is not None and not (isinstance(parent, str) and _HEX_RE.fullmatch(parent.lower())):
            raise HubError(400, f"Invalid parentCommit: {parent!r}")
        parent = parent.lower() if parent else None
        create_pr = req.flag("create_pr")
        with self._lock:
            repo = self._repo(req, plural, ns, name)
            target = repo.writable_ref(rev)
            if target is None:
                raise _not_found("RevisionNotFound", rev)
            kind, ref = target
            head = repo.branches[ref] if kind == "branch" else repo.pr_refs[ref]
            if create_pr:
                if kind != "branch":
                    raise HubError(400, "A pull request must target a branch")
                start = head
                if parent is not None:  # the PR starts from parentCommit
                    start = repo.resolve(parent) or ""
                    if start not in repo.commits:
                        raise _not_found("RevisionNotFound", parent)
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
        return _json_response({
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
                    raise _not_found("RevisionNotFound", branch)
                if branch == DEFAULT_BRANCH:
                    raise HubError(403, "Cannot delete the default branch")
                del repo.branches[branch]
            else:
                _check_ref_name(branch, "branch")
                body = req.json()
                if branch in repo.branches:
                    raise HubError(409, f"Branch {branch} already exists")
                repo.branches[branch] = self._resolve_rev(repo, str(body.get("startingPoint") or DEFAULT_BRANCH))
            self._save()
        return _json_response({})

    def _tag(self, req: Request, plural: str, ns: str, name: str, rest: str) -> Response:
        with self._lock:
            repo = self._repo(req, plural, ns, name)
            if req.method == "DELETE":
                tag = unquote(rest)
                tag = tag[len("refs/tags/"):] if tag.startswith("refs/tags/") else tag
                if tag not in repo.tags:
                    raise _not_found("RevisionNotFound", tag)
                del repo.tags[tag]
            else:
                rev, _ = self._split_rev(rest)
                tag = req.json().get("tag")
                if not isinstance(tag, str):
                    raise HubError(400, "Missing tag name")
                _check_ref_name(tag, "tag")
                oid = self._resolve_rev(repo, rev)
                if tag in repo.tags:
                    raise HubError(409, f"Tag {tag} already exists")
                repo.tags[tag] = oid
            self._save()
        return _json_response({})

    # -- handlers: discussions and pull requests ----------------------------------------

    def _event(self, kind: str, data: dict) -> dict:
        return {"id": secrets.token_hex(12), "type": kind, "createdAt": _iso(time.time()),
                "author": {"name": self.user}, "data": data}

    def _comment_event(self, text: str) -> dict:
        now = _iso(time.time())
        latest = {"raw": text, "html": text, "updatedAt": now, "author": {"name": self.user}}
        return self._event("comment", {"edited": False, "hidden": False, "latest": latest,
                                       "numEdits": 0, "editors": [self.user], "history": [latest]})

    def _open_pr(self, repo: Repo, title: str, description: str, *, base: str | None, start: str | None,
                 status: str, is_pr: bool = True) -> int:
        num = max(repo.discussions, default=0) + 1
        repo.discussions[num] = Discussion(
            num=num, title=title, author=self.user, created_at=_iso(time.time()), is_pull_request=is_pr,
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
                return _json_response({"num": num, "pullRequest": is_pr, "url": url})
            kind, status, author = req.arg("type", "all"), req.arg("status", "all"), req.arg("author")
            found = [
                d for d in sorted(repo.discussions.values(), key=lambda d: -d.num)
                if (kind == "all" or d.is_pull_request == (kind == "pull_request"))
                and (status == "all" or d.status == status or (status == "open" and d.status == "draft"))
                and (author is None or d.author == author)
            ]
            start = req.page() * DISCUSSIONS_PAGE_SIZE
            return _json_response({
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
        return _json_response(data)

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
                return _json_response({"newMessage": event})
            if action == "status":
                status = body.get("status")
                if status not in ("open", "closed") or d.status == "merged":
                    raise HubError(400, f"Cannot change status to {status!r}")
                d.status = status
                event = self._event("status-change", {"status": status})
                d.events.append(event)
                self._save()
                return _json_response({"newStatus": event})
            return self._merge(repo, d)

    def _merge(self, repo: Repo, pr: Discussion) -> Response:
        """Three-way merge of refs/pr/N into its base branch (a merge commit)."""
        if not pr.is_pull_request or pr.status not in ("open", "draft"):
            raise HubError(400, "Only open pull requests can be merged")
        fork = repo.commits[pr.start].files  # type: ignore[index]
        head = repo.commits[repo.pr_refs[pr.num]]
        base_oid = repo.branches.get(pr.base or "")
        if base_oid is None:
            raise _not_found("RevisionNotFound", pr.base or "")
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
        return _json_response({})

    # -- handlers: file downloads ---------------------------------------------------------

    def _resolve(self, req: Request, prefix: str | None, ns: str, name: str, rest: str) -> Response:
        rev, path = self._split_rev(rest)
        with self._lock:
            repo = self._repo(req, prefix, ns, name)
            oid = self._resolve_rev(repo, rev)
            blob = repo.commits[oid].files.get(path)
            if blob is None:
                raise _not_found("EntryNotFound", path, headers={"X-Repo-Commit": oid})
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run a Hub-compatible test server on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default=None, help="require this bearer token for writes")
    parser.add_argument("--data-dir", type=Path, default=None, help="persist the store here")
    parser.add_argument("--untrusted", action="store_true", help="report trustedKernelPublisher=false")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    server = HubServer(token=args.token, trusted_publisher=not args.untrusted, data_dir=args.data_dir, port=args.port)
    server.start()
    print(f"HF_ENDPOINT={server.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
