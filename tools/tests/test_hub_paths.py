"""kbuild_hub stores only paths every client can download (issue 21, item 6): NUL, newlines,
parts of only whitespace and overlong paths are refused (400) and nothing is stored; whatever
it does store, the real huggingface_hub client downloads back. `kbuild hub serve --read-token`
gives a token that reads (private repos too) and cannot write."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time

import pytest
from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download
from huggingface_hub.errors import HfHubHTTPError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbuild.core.errors import BuildError
from kbuild.publish.hub import check_client
from kbuild_hub.server import HubServer

try:
    check_client()
except BuildError as e:  # e.g. the GPU image's huggingface_hub 1.x
    pytest.skip(e.message, allow_module_level=True)
REPO = "org/paths"


@pytest.fixture(scope="module")
def hub():
    with HubServer() as server:
        HfApi(endpoint=server.url, token="t").create_repo(REPO, repo_type="kernel")
        yield server


def stored(hub: HubServer) -> set[str]:
    return set(hub.files(REPO))


def raw_commit(hub: HubServer, path: str) -> int:
    """A commit adding `path` as the client sends it (NDJSON), bypassing the client's own checks."""
    body = "\n".join(json.dumps(line) for line in [
        {"key": "header", "value": {"summary": "add"}},
        {"key": "file", "value": {"path": path, "content": "eA==", "encoding": "base64"}}])
    conn = http.client.HTTPConnection(hub.url.split("://")[1], timeout=10)
    conn.request("POST", f"/api/kernels/{REPO}/commit/main", body=body,
                 headers={"Content-Type": "application/x-ndjson"})
    status = conn.getresponse().status
    conn.close()
    return status


@pytest.mark.parametrize("path", ["a\x00b.txt", "dir/a\nb.txt", "line\r.txt", "   ", "dir/ /x.txt",
                                  "\t/x", "a" * 5000, "d/" + "n" * 256, "/".join(["d"] * 600),
                                  "a\u2028b", "tab\there"])
def test_paths_no_client_can_download_are_refused(hub, path):
    before = stored(hub)
    assert raw_commit(hub, path) == 400
    with pytest.raises((HfHubHTTPError, ValueError)):
        HfApi(endpoint=hub.url, token="t").create_commit(
            REPO, [CommitOperationAdd(path, b"x")], commit_message="add", repo_type="kernel")
    assert stored(hub) == before


def test_long_and_unusual_names_within_the_limits_still_work(hub, tmp_path):
    api = HfApi(endpoint=hub.url, token="t")
    paths = ["n" * 255, "é" * 127, "dir with spaces/ leading and trailing ", "ünï/çødé.txt"]
    api.create_commit(REPO, [CommitOperationAdd(p, p.encode()) for p in paths],
                      commit_message="add", repo_type="kernel")
    for p in paths:
        got = hf_hub_download(REPO, p, repo_type="kernel", endpoint=hub.url, token="t",
                              cache_dir=tmp_path / "cache")
        assert open(got, "rb").read() == p.encode()


PATHS = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40),
    st.lists(st.text(st.sampled_from("ab. -_é\t\n\x00\u2028/"), min_size=1, max_size=8),
             min_size=1, max_size=4).map("/".join),
    st.builds(lambda n, c: c * n, st.integers(200, 1200), st.sampled_from(["a", "é", "a/", "ab/"])))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(path=PATHS)
def test_what_the_server_stores_the_client_downloads(hub, tmp_path, path):
    api = HfApi(endpoint=hub.url, token="t")
    try:
        api.create_commit(REPO, [CommitOperationAdd(path, b"content")], commit_message="add",
                          repo_type="kernel")
    except ValueError:  # the client's own checks
        return
    except HfHubHTTPError as e:
        assert e.response.status_code == 400, e
        assert path not in stored(hub)
        return
    stored_as = path.removeprefix("/").removeprefix("./")
    got = hf_hub_download(REPO, stored_as, repo_type="kernel", endpoint=hub.url, token="t",
                          cache_dir=tmp_path / "cache")
    assert open(got, "rb").read() == b"content"


# --- kbuild hub serve --read-token ------------------------------------------------------------------

def serve(*args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "kbuild", "hub", "serve", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "HF_ENDPOINT=" in line:
            return proc, line.split("HF_ENDPOINT=", 1)[1].strip()
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("kbuild hub serve printed no endpoint")


def test_serve_with_a_read_only_token():
    proc, url = serve("--token", "hf_write", "--read-token", "hf_read")
    try:
        writer, reader = HfApi(endpoint=url, token="hf_write"), HfApi(endpoint=url, token="hf_read")
        writer.create_repo("org/secret", repo_type="kernel", private=True)
        assert reader.repo_info("org/secret", repo_type="kernel").private is True
        with pytest.raises(HfHubHTTPError) as refused:
            reader.create_repo("org/other", repo_type="kernel")
        assert refused.value.response.status_code == 403
        with pytest.raises(HfHubHTTPError) as refused:
            reader.create_commit("org/secret", [CommitOperationAdd("a.txt", b"x")],
                                 commit_message="x", repo_type="kernel")
        assert refused.value.response.status_code == 403
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize("args", [["--read-token", "r"], ["--token", "same", "--read-token", "same"]])
def test_a_read_token_needs_a_different_write_token(args):
    proc = subprocess.run([sys.executable, "-m", "kbuild", "hub", "serve", "--port", "0", *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "error:" in proc.stderr and "--read-token" in proc.stderr
    assert "Traceback" not in proc.stderr
