"""A Hugging Face Hub-compatible HTTP server for tests (stdlib only).

The real `huggingface_hub` and `kernels` clients talk to it unchanged through
`HF_ENDPOINT` (or `HfApi(endpoint=...)`). It keeps git-like repositories in memory
(optionally persisted to a directory): commits with full file snapshots, branches,
tags and pull requests (`refs/pr/N`). Every file is a regular git blob, so the
clients never need Xet or LFS. Unknown routes answer 404 with a JSON error and are
recorded in `HubServer.unknown_routes`.

Modules: `model` (repos, commits, refs), `wire` (HTTP plumbing), `store` (state, persistence),
`routes_*` (the handlers); this one holds the route table, authentication and the lifecycle.

    kbuild hub serve --port 8080 [--token T] [--data-dir D]     (or: python -m kbuild_hub ...)
"""

from __future__ import annotations

import argparse
import copy
import logging
import re
import socket
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from .model import HubError, Repo, git_blob_oid
from .routes_discussions import DiscussionRoutes
from .routes_repos import RepoRoutes
from .routes_write import WriteRoutes
from .wire import Fault, Handler, Request, Response, Server, error_response

__all__ = ["HubServer", "Route", "git_blob_oid", "main"]

log = logging.getLogger(__name__)
READ_METHODS = ("GET", "HEAD")


@dataclass(frozen=True)
class Route:
    """One API route: what it answers, and whether it needs the write token."""

    methods: tuple[str, ...]
    pattern: re.Pattern
    handler: Callable[..., Response]
    writes: bool


class HubServer(RepoRoutes, WriteRoutes, DiscussionRoutes):
    """Hub-compatible server on 127.0.0.1 (see module docstring).

    Switches that tests may flip at any time: `trusted_publisher` (the org overview's
    `trustedKernelPublisher`), `token` (when set, every write route needs
    `Authorization: Bearer <token>`, and so do private reads), `read_token` (a second token
    that reads, private repos included, but gets 403 on writes, like a read-only Hub token),
    and `inject_faults(...)`. Whether a request writes is a property of its route (`routes`),
    never of its path's text.
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        read_token: str | None = None,
        trusted_publisher: bool = True,
        data_dir: Path | None = None,
        port: int = 0,
        user: str = "test-user",
    ):
        self.token = token
        self.read_token = read_token
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
        self._trees: dict[str, dict[str, str]] = {}
        self._saved_blobs: set[str] = set()
        self._faults: list[Fault] = []
        self._connections: set[socket.socket] = set()
        self._httpd: Server | None = None
        self._thread: threading.Thread | None = None
        self.routes = self._build_routes()
        if self.data_dir is not None:
            self._load()

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> "HubServer":
        httpd = Server(("127.0.0.1", self.port), Handler)
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
        fault = Fault(status, drop, delay, count, tuple(m.upper() for m in methods), path_contains)
        with self._lock:
            self._faults.append(fault)

    def _take_fault(self, method: str, target: str) -> Fault | None:
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

    def snapshot(self) -> dict[str, Any]:
        """A deep copy of every repo (commits, branches, tags, PRs, settings) and blob id."""
        with self._lock:
            return copy.deepcopy({"repos": {f"{t}:{i}": asdict(r) for (t, i), r in self._repos.items()},
                                  "blobs": sorted(self._blobs)})

    # -- routing -------------------------------------------------------------------

    def _build_routes(self) -> list[Route]:
        repo = r"/api/(models|datasets|spaces|kernels)/([^/]+)/([^/]+)"
        get, post = READ_METHODS, ("POST",)
        read, write = False, True
        table = [
            (get, r"/api/whoami-v2", self._whoami, read),
            (get, r"/api/agent-harnesses", self._agent_harnesses, read),
            (post, r"/api/repos/create", self._create_repo, write),
            (post, r"/api/repos/delete", self._delete_repo, write),
            (post, r"/api/validate-yaml", self._validate_yaml, read),
            (get, r"/api/organizations/([^/]+)/overview", self._org_overview, read),
            (get, repo, self._repo_info, read),
            (get, repo + r"/revision/(.+)", self._repo_info, read),
            (get, repo + r"/refs", self._refs, read),
            (get, repo + r"/tree/(.+)", self._tree, read),
            (post, repo + r"/paths-info/(.+)", self._paths_info, read),
            (get, repo + r"/commits/(.+)", self._commits, read),
            (post, repo + r"/preupload/(.+)", self._preupload, write),
            (post, repo + r"/commit/(.+)", self._commit, write),
            (("POST", "DELETE"), repo + r"/branch/(.+)", self._branch, write),
            (("POST", "DELETE"), repo + r"/tag/(.+)", self._tag, write),
            (("PUT",), repo + r"/settings", self._settings, write),
            (get, repo + r"/discussions", self._discussions, read),
            (post, repo + r"/discussions", self._discussions, write),
            (get, repo + r"/discussions/(\d+)", self._discussion_details, read),
            (post, repo + r"/discussions/(\d+)/(merge|status|comment)", self._discussion_action, write),
            (get, r"/(?:(datasets|spaces|kernels)/)?([^/]+)/([^/]+)/(?:resolve|raw)/(.+)", self._resolve, read),
        ]
        return [Route(methods, re.compile(pattern), handler, writes)
                for methods, pattern, handler, writes in table]

    def route_for(self, method: str, path: str) -> tuple[Route | None, re.Match | None]:
        """The route that answers `method` on the raw `path` (the first match), and its match."""
        for route in self.routes:
            m = route.pattern.fullmatch(path)
            if m and method in route.methods:
                return route, m
        return None, None

    def _dispatch(self, req: Request) -> Response:
        try:
            route, match = self.route_for(req.method, req.path)
            # Unrouted requests that could write need the token too: deny by default.
            self._check_token(req, writes=route.writes if route else req.method not in READ_METHODS)
            if route is not None and match is not None:
                return route.handler(req, *match.groups())
            if any(r.pattern.fullmatch(req.path) for r in self.routes):
                raise HubError(405, f"Method {req.method} not allowed on {req.path}")
            self.unknown_routes.append((req.method, req.target))
            log.warning("hubserver: unknown route %s %s", req.method, req.target)
            return error_response(HubError(404, f"Unknown route: {req.method} {req.path}"))
        except HubError as err:
            return error_response(err)
        except Exception as exc:  # a server bug: answer 500, keep serving
            log.exception("hubserver: %s %s failed", req.method, req.target)
            return error_response(HubError(500, f"Internal error: {exc!r}"))

    def _check_token(self, req: Request, *, writes: bool) -> None:
        if self.token is None:
            return
        given = req.bearer()
        if given is not None and given not in (self.token, self.read_token):
            raise HubError(401, "Invalid credentials in Authorization header")
        if writes and given is None:
            raise HubError(401, "You must be authenticated to access this resource")
        if writes and given != self.token:
            raise HubError(403, "You don't have the rights to write with a read-only token")



def token_problem(option: str, value: str | None) -> str | None:
    """Why a token given on the command line could never match what a client sends (HTTP drops
    the spaces around a header's value), or None."""
    if value is not None and not value.strip():
        return f"{option} is empty (or blank): no client can send that token"
    if value is not None and (value != value.strip() or not value.isprintable() or " " in value):
        return f"{option} {value!r} holds spaces or control characters: no client can send it"
    return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run a Hub-compatible test server on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default=None, help="require this bearer token for writes")
    parser.add_argument("--read-token", default=None, help="also accept this token, for reads only")
    parser.add_argument("--data-dir", type=Path, default=None, help="persist the store here")
    parser.add_argument("--untrusted", action="store_true", help="report trustedKernelPublisher=false")
    args = parser.parse_args(argv)
    for option, value in (("--token", args.token), ("--read-token", args.read_token)):
        if token_problem(option, value):
            parser.error(token_problem(option, value))
    if args.read_token is not None and (args.token is None or args.read_token == args.token):
        parser.error("--read-token needs a different --token (without one, no token is checked)")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    server = HubServer(token=args.token, read_token=args.read_token, trusted_publisher=not args.untrusted,
                       data_dir=args.data_dir, port=args.port)
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

