"""Reading from an untrusted web server with one deadline for the whole exchange.

`Deadline(seconds)` limits the wall time of everything between entering and leaving it:
connecting, TLS, the answer's headers, its body, redirects. When it passes, every socket the
exchange opened is shut down, so whatever read waits on it ends at once: a server that answers
slowly, or trickles a byte every few seconds, cannot hold the caller (a socket timeout alone
would only bound each read). Only http(s) is read and followed (no file:, ftp:, data:).
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import urllib.error
import urllib.request
from urllib.parse import urlsplit, urlunsplit

WEB = ("http", "https")


def cut(sock: socket.socket) -> None:
    """Ends a connection's reads and writes now, from any thread (TLS state left alone)."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class WebRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects to http(s) only."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if urlsplit(newurl).scheme not in WEB:
            raise urllib.error.URLError(f"redirected to {newurl[:200]!r}: only http(s) is read")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class Deadline:
    """`with Deadline(s) as d: d.opener().open(...)`: the exchange ends within `s` seconds;
    `d.expired` says whether the deadline is what ended it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = threading.Event()
        self._sockets: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._cut_all)
        self._timer.daemon = True

    def __enter__(self) -> "Deadline":
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()

    def _cut_all(self) -> None:
        self.expired.set()
        for sock in list(self._sockets):
            cut(sock)

    def _watch(self, sock: socket.socket) -> None:
        self._sockets.append(sock)
        if self.expired.is_set():
            cut(sock)

    def opener(self, *extra: urllib.request.BaseHandler) -> urllib.request.OpenerDirector:
        """http(s) only, redirects included; the socket of every connection it makes is watched
        once connected (so the deadline can cut it, even after urllib hands it to the
        response), and one connected after the deadline is cut at once. `extra`: more
        handlers (authentication, file:// for a local mirror)."""
        watch = self._watch

        def tracked(cls):
            class Tracked(cls):
                def connect(self):
                    super().connect()
                    watch(self.sock)
            return Tracked

        class Http(urllib.request.HTTPHandler):
            def http_open(self, req):
                return self.do_open(tracked(http.client.HTTPConnection), req)

        class Https(urllib.request.HTTPSHandler):
            def https_open(self, req):
                return self.do_open(tracked(http.client.HTTPSConnection), req, context=self._context)

        opener = urllib.request.OpenerDirector()
        for handler in (urllib.request.ProxyHandler(), Http(), Https(), WebRedirects(),
                        urllib.request.HTTPDefaultErrorHandler(), urllib.request.HTTPErrorProcessor(),
                        *extra):
            opener.add_handler(handler)
        return opener


def public(url: str) -> str:
    """`url` without what may be secret in it (user, password, query, fragment), for messages
    and records; a URL that does not parse is not shown at all."""
    try:
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
    except ValueError:
        return "(a malformed URL)"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
