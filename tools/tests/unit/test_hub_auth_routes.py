"""kbuild_hub authenticates by route and method: every write route refuses a request without a
token, with a wrong one (401) or with a read-only one (403), and changes nothing."""

from __future__ import annotations

import http.client
import json

import pytest

from kbuild_hub.server import HubServer

TOKEN = "hf_write_token_for_auth_tests"
READ_TOKEN = "hf_read_only_token_for_auth_tests"
REPO = "/api/kernels/org/tiny"


def _commit_body(path: str) -> str:
    lines = [{"key": "header", "value": {"summary": "sneak"}},
             {"key": "file", "value": {"path": path, "content": "eA==", "encoding": "base64"}}]
    return "\n".join(json.dumps(line) for line in lines)


# (method, path, body): one request per write route and method; the `/paths-info/` ones once
# slipped through, because authentication looked for that text in the path.
WRITES = [
    ("POST", "/api/repos/create", {"name": "new", "organization": "org", "type": "kernel"}),
    ("POST", "/api/repos/delete", {"name": "tiny", "organization": "org", "type": "kernel"}),
    ("POST", f"{REPO}/preupload/main", {"files": [{"path": "a.txt", "size": 1, "sample": ""}]}),
    ("POST", f"{REPO}/commit/main", _commit_body("a.txt")),
    ("POST", f"{REPO}/commit/main/paths-info/x", _commit_body("b.txt")),
    ("POST", f"{REPO}/branch/feature", {}),
    ("POST", f"{REPO}/branch/a/paths-info/b", {}),
    ("DELETE", f"{REPO}/branch/v1", None),
    ("POST", f"{REPO}/tag/main", {"tag": "v9.9.9"}),
    ("POST", f"{REPO}/tag/main/paths-info/x", {"tag": "v8.8.8"}),
    ("DELETE", f"{REPO}/tag/v0.1.0", None),
    ("PUT", f"{REPO}/settings", {"private": True}),
    ("POST", f"{REPO}/discussions", {"title": "t", "pullRequest": True}),
    ("POST", f"{REPO}/discussions/1/comment", {"comment": "x"}),
    ("POST", f"{REPO}/discussions/1/status", {"status": "closed"}),
    ("POST", f"{REPO}/discussions/1/merge", {}),
]


def request(hub: HubServer, method: str, path: str, body=None, token: str | None = None):
    conn = http.client.HTTPConnection(hub.url.split("://")[1], timeout=10)
    data = body if isinstance(body, str) else (json.dumps(body) if body is not None else None)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    conn.request(method, path, body=data, headers=headers)
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return resp.status


def seeded(hub: HubServer) -> HubServer:
    """org/tiny with branch v1, tag v0.1.0 and an open pull request #1."""
    for method, path, body in [
        ("POST", "/api/repos/create", {"name": "tiny", "organization": "org", "type": "kernel"}),
        ("POST", f"{REPO}/branch/v1", {}),
        ("POST", f"{REPO}/tag/main", {"tag": "v0.1.0"}),
        ("POST", f"{REPO}/discussions", {"title": "pr", "pullRequest": True}),
        ("POST", f"{REPO}/commit/refs%2Fpr%2F1", _commit_body("pr.txt")),
    ]:
        assert request(hub, method, path, body, TOKEN) == 200, (method, path)
    return hub


@pytest.fixture
def hub():
    with HubServer(token=TOKEN, read_token=READ_TOKEN) as server:
        yield seeded(server)


def test_every_write_route_is_covered():
    server = HubServer(token=TOKEN)
    covered = set()
    for method, path, _ in WRITES:
        route, _match = server.route_for(method, path.split("?")[0])
        assert route is not None and route.writes, (method, path)
        covered.add((route.pattern.pattern, method))
    every = {(r.pattern.pattern, m) for r in server.routes if r.writes for m in r.methods}
    assert covered == every


@pytest.mark.parametrize("method, path, body", WRITES, ids=[f"{m} {p}" for m, p, _ in WRITES])
def test_write_route_needs_the_write_token(hub, method, path, body):
    before = hub.snapshot()
    for token, status in ((None, 401), ("hf_wrong", 401), (READ_TOKEN, 403)):
        assert request(hub, method, path, body, token) == status, token
        assert hub.snapshot() == before, token
    # The same request with the write token is a real write (so the refusals above mean something).
    assert request(hub, method, path, body, TOKEN) == 200
    if "/preupload/" not in path:
        assert hub.snapshot() != before


def test_reads_need_no_token_and_refuse_a_wrong_one(hub):
    assert request(hub, "GET", f"{REPO}/refs") == 200
    assert request(hub, "POST", f"{REPO}/paths-info/main", {"paths": ["x"]}) == 200
    assert request(hub, "GET", f"{REPO}/refs", token=READ_TOKEN) == 200
    assert request(hub, "GET", f"{REPO}/refs", token="hf_wrong") == 401
    assert request(hub, "PUT", f"{REPO}/settings", {"private": True}, TOKEN) == 200
    assert request(hub, "GET", f"{REPO}/refs") == 401  # private: anonymous reads are refused
    assert request(hub, "GET", f"{REPO}/refs", token=READ_TOKEN) == 200
    # An unknown POST is refused before it is found unknown: nothing unrouted writes unauthenticated.
    assert request(hub, "POST", "/api/some/new/route") == 401
    assert request(hub, "POST", "/api/some/new/route", token=TOKEN) == 404


def test_whoami_reports_the_token_role(hub):
    from huggingface_hub import HfApi
    role = {t: HfApi(endpoint=hub.url, token=t).whoami()["auth"]["accessToken"]["role"]
            for t in (TOKEN, READ_TOKEN)}
    assert role == {TOKEN: "write", READ_TOKEN: "read"}


@pytest.mark.parametrize("args, option", [
    (["--token", ""], "--token"),
    (["--token", "   "], "--token"),
    (["--token", " hf_x "], "--token"),
    (["--token", "hf_a\tb"], "--token"),
    (["--token", "hf_w", "--read-token", ""], "--read-token"),
    (["--token", "hf_w", "--read-token", "hf_r "], "--read-token"),
])
def test_serve_refuses_a_token_no_client_can_send(args, option, monkeypatch, capsys):
    """`hub serve --token ""` once said it checked no token and then refused every request; a
    token with spaces around it could never match (HTTP drops them). Both CLIs refuse them,
    exit 2, before serving anything."""
    import sys
    import time

    from kbuild.cli.app import main
    from kbuild_hub.server import main as hub_main

    def served(_seconds):  # a server that started would wait here: stop it at once
        raise KeyboardInterrupt
    monkeypatch.setattr(time, "sleep", served)
    monkeypatch.setattr(sys, "argv", ["kbuild", "hub", "serve", "--port", "0", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"error: {option}" in err and "no client can send" in err, err
    assert "export HF_ENDPOINT" not in err and "Traceback" not in err
    with pytest.raises(SystemExit) as exited:
        hub_main(["--port", "0", *args])
    assert exited.value.code == 2 and "no client can send" in capsys.readouterr().err
