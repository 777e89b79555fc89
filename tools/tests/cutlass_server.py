"""NVIDIA's CUTLASS tag archives served from 127.0.0.1, at the paths GitHub uses, for the tests
and for filling a header cache offline (tests/compat/run_corpus.py --prefetch).

The archives are test input kept beside the checkout (../shared/cutlass/, or cutlass/ in
$KBUILD_TEST_SHARED; its README says what they hold): the header trees of one tagged release
each, in GitHub's archive layout.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from functools import cached_property
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("KBUILD_TEST_SHARED") or REPO.parent / "shared")
ARCHIVES = SHARED / "cutlass"
TAGS = "/NVIDIA/cutlass/archive/refs/tags"


def archive_path(version: str) -> Path:
    return ARCHIVES / f"cutlass-{version}-headers.tar.gz"


def available_versions(folder: Path = ARCHIVES) -> list[str]:
    return sorted(p.name.removeprefix("cutlass-").removesuffix("-headers.tar.gz")
                  for p in folder.glob("cutlass-*-headers.tar.gz"))


@dataclass(frozen=True)
class Slow:
    """An answer that waits `before` seconds before its status line, then sends `data` one
    byte every `every` seconds (a server that stalls, or trickles)."""
    data: bytes = b""
    before: float = 0.0
    every: float = 0.0


class ArchiveServer:
    """A local HTTP server: `routes` maps a path (its query ignored) to bytes (200), an int (that
    status), a str (a 302 to that path), (bytes, n): a 200 that announces n bytes and sends
    fewer, then closes (a download that breaks off), or a `Slow` answer; anything else is a
    404. `hits` lists the paths asked for (with their query), `auth` the Authorization header
    of each (None without one)."""

    def __init__(self):
        self.routes: dict[str, bytes | int | str | tuple[bytes, int] | Slow] = {}
        self.hits: list[str] = []
        self.auth: list[str | None] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (the http.server API)
                server.hits.append(self.path)
                server.auth.append(self.headers.get("Authorization"))
                answer = server.routes.get(urlsplit(self.path).path, 404)
                if isinstance(answer, Slow):
                    self.slowly(answer)
                elif isinstance(answer, (bytes, tuple)):
                    data, length = answer if isinstance(answer, tuple) else (answer, len(answer))
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-gzip")
                    self.send_header("Content-Length", str(length))
                    self.end_headers()
                    self.wfile.write(data)
                    self.close_connection = True
                elif isinstance(answer, str):
                    self.send_response(302)
                    self.send_header("Location", answer)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self.send_error(answer)

            def slowly(self, answer: Slow) -> None:
                time.sleep(answer.before)
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(answer.data)))
                    self.end_headers()
                    for i in range(len(answer.data)):
                        self.wfile.write(answer.data[i:i + 1])
                        self.wfile.flush()
                        time.sleep(answer.every)
                except OSError:  # the client gave up
                    pass
                self.close_connection = True

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @cached_property
    def base(self) -> str:
        """What KBUILD_CUTLASS_URL is set to."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{TAGS}"

    def serve(self, version: str, data: bytes, *, redirect: bool = False) -> None:
        """`data` at the tag's path, or (redirect) at a second path the tag's path sends to, as
        GitHub sends to codeload."""
        path = f"{TAGS}/v{version}.tar.gz"
        if redirect:
            self.routes[path] = f"/codeload/NVIDIA/cutlass/tar.gz/refs/tags/v{version}"
            self.routes[self.routes[path]] = data
        else:
            self.routes[path] = data

    def __enter__(self) -> "ArchiveServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def serve_folder(folder: Path = ARCHIVES, *, redirect: bool = False) -> ArchiveServer:
    """A server (not yet started: use `with`) of every `cutlass-X.Y.Z-headers.tar.gz` in `folder`."""
    server = ArchiveServer()
    for version in available_versions(folder):
        server.serve(version, (folder / f"cutlass-{version}-headers.tar.gz").read_bytes(),
                     redirect=redirect)
    return server
