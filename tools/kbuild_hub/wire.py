"""HTTP plumbing: the parsed request, the answer, injected faults, and the stdlib handler that
reads a request, applies a fault if one is armed, and hands it to its `Hub` (`HubServer`)."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs

from .model import HubError

log = logging.getLogger("kbuild_hub.server")

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


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(status, json.dumps(data).encode(), dict(headers or {}))


def error_response(err: HubError) -> Response:
    headers = {"X-Error-Message": err.message.encode("latin-1", "replace").decode("latin-1")}
    if err.code:
        headers["X-Error-Code"] = err.code
    headers.update(err.extra.pop("headers", {}))
    return json_response({"error": err.message, **err.extra}, err.status, headers)


@dataclass
class Fault:
    status: int | None
    drop: bool
    delay: float
    count: int
    methods: tuple[str, ...]
    path_contains: str


class Hub(Protocol):
    """What the handler needs of the server it serves (server.HubServer)."""
    url: str
    requests: list[tuple[str, str, int]]  # (method, raw target, status); 0 = dropped
    _connections: set

    def _take_fault(self, method: str, target: str) -> Fault | None: ...

    def _dispatch(self, req: Request) -> Response: ...


class Handler(BaseHTTPRequestHandler):
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
        hub: Hub = self.server.hub  # type: ignore[attr-defined]
        try:
            body = self._read_body()
        except ValueError:  # bad Content-Length or chunk size: answer, then hang up
            self.close_connection = True
            self._send(error_response(HubError(400, "Malformed request body framing")))
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
                self._send(error_response(HubError(fault.status, f"Injected fault ({fault.status})")))
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
        hub: Hub = self.server.hub  # type: ignore[attr-defined]
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


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    hub: Hub

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Route errors are answered in _dispatch; what lands here is a client hanging up mid-answer.
        log.debug("hubserver: connection from %s ended with an error", client_address, exc_info=True)

