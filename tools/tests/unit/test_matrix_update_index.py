"""`kbuild matrix update` against crafted index answers served from 127.0.0.1 (issue 21, item 5):
every malformed answer is one clean error, only http(s) is read, a CUDA label must name a CUDA
release, and one deadline bounds each request. In process."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kbuild.cli import app
from kbuild.core.errors import BuildError
from kbuild.matrix import matrix, torch_releases, update
from kbuild_testing import pixi_before_2_15

REPO = Path(__file__).resolve().parents[3]
JSON = "application/vnd.pypi.simple.v1+json"


def wheel(version: str, arch: str = "x86_64") -> str:
    return f"torch-{version}-cp311-cp311-manylinux_2_28_{arch}.whl"


class Answers(BaseHTTPRequestHandler):
    """Answers {path: (content type, body)}; "/slow/..." trickles its answer a byte at a time."""
    pages: dict[str, tuple[str, bytes]] = {}
    asked: list[str] = []

    def do_GET(self):  # noqa: N802
        self.asked.append(self.path)
        if self.path.startswith("/slow-headers/"):
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            for byte in b"Content-Type: text/html\r\nX-Padding: " + b"x" * 100:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.2)
            return
        page = self.pages.get(self.path.split("?")[0])
        if page is None:
            self.send_error(404)
            return
        if page[0] == "redirect":
            self.send_response(302)
            self.send_header("Location", page[1].decode())
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", page[0])
        if self.path.startswith("/slow/"):
            self.end_headers()
            for byte in page[1]:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.2)
            return
        self.send_header("Content-Length", str(len(page[1])))
        self.end_headers()
        self.wfile.write(page[1])

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that gave up on a slow answer


@pytest.fixture(scope="module")
def index():
    server = Server(("127.0.0.1", 0), Answers)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def pixi(tmp_path) -> Path:
    return pixi_before_2_15(tmp_path)


def serve(name: str, ctype: str, body: bytes | str) -> str:
    Answers.pages[f"/{name}/torch/"] = (ctype, body.encode() if isinstance(body, str) else body)
    return name


def page(*files: dict) -> str:
    return json.dumps({"meta": {"api-version": "1.1"}, "name": "torch", "files": list(files)})


MALFORMED = {
    "invalid JSON": "{\"files\": [",
    "not UTF-8": b"{\"files\": [\"\xff\xfe\"]}",
    "a file without filename": page({"url": "x.whl"}),
    "files is a string": json.dumps({"files": "abc"}),
    "a top-level list": json.dumps([{"filename": wheel("2.15.0+cu130"), "url": "x"}]),
    "a filename that is a number": page({"filename": 5, "url": "x"}),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_answer_is_one_clean_error(index, pixi, case):
    name = serve(f"bad{list(MALFORMED).index(case)}", JSON, MALFORMED[case])
    with pytest.raises(BuildError, match="is not a simple-API project page") as e:
        torch_releases.releases(f"{index}/{name}", "3.11")
    assert "\n" not in e.value.message
    before = pixi.read_text()
    result = CliRunner().invoke(app, ["matrix", "update", "--matrix", str(pixi), "--index",
                                      f"{index}/{name}", "--dry-run"])
    assert isinstance(result.exception, BuildError), result.exception
    assert pixi.read_text() == before


def test_a_5000_digit_version_is_not_a_release(index):
    name = serve("huge", JSON, page({"filename": wheel("2." + "9" * 5000 + ".0+cu130"), "url": "a.whl"},
                                    {"filename": wheel("2.15.0+cu130"), "url": "b.whl"}))
    assert list(torch_releases.releases(f"{index}/{name}", "3.11")) == [torch_releases.Version("2.15.0")]


def test_local_files_are_never_read(index, tmp_path):
    """A `file:` link with core metadata once had the metadata read from this machine's disk."""
    metadata = tmp_path / (wheel("2.15.0") + ".metadata")
    metadata.write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.15.0\n"
                        "Requires-Dist: cuda-toolkit==13.0.*\n")
    name = serve("local", JSON, page({"filename": wheel("2.15.0"), "url": metadata.as_uri()[:-9],
                                      "core-metadata": True}))
    with pytest.raises(BuildError, match=r"only http\(s\) is read"):
        torch_releases.releases(f"{index}/{name}", "3.11")
    with pytest.raises(BuildError, match=r"only http\(s\) indexes are read"):
        torch_releases.releases(tmp_path.as_uri(), "3.11")
    for n, target in enumerate((metadata.as_uri(), "ftp://127.0.0.1/torch/")):
        Answers.pages[f"/moved{n}/torch/"] = ("redirect", target.encode())
        with pytest.raises(BuildError, match=r"only http\(s\) is read|is not allowed"):
            torch_releases.releases(f"{index}/moved{n}", "3.11")


def test_cuda_labels_name_cuda_releases(index):
    name = serve("labels", JSON, page(*[{"filename": wheel(f"2.15.0+{c}"), "url": f"{c}.whl"}
                                        for c in ("cu999", "cu127", "cu1", "cu130", "cpu", "cu1300")]))
    assert torch_releases.releases(f"{index}/{name}", "3.11")[torch_releases.Version("2.15.0")].computes == {
        "cu130": {"linux-64"}, "cpu": {"linux-64"}}
    assert [torch_releases.cuda_of_label(c) for c in ("cu118", "cu126", "cu131", "cu127", "cu999")] == [
        "11.8", "12.6", "13.1", None, None]


def test_metadata_naming_no_cuda_release_is_not_followed(index, pixi):
    Answers.pages["/files/" + wheel("2.15.0") + ".metadata"] = (
        "text/plain", b"Metadata-Version: 2.1\nName: torch\nRequires-Dist: cuda-toolkit==99.9.*\n")
    name = serve("meta", "text/html", f'<a href="/files/{wheel("2.15.0")}" '
                                      f'data-core-metadata="true">w</a>')
    unknown: list[str] = []
    found = torch_releases.releases(f"{index}/{name}", "3.11", update.newer_than(matrix.load(pixi)),
                            unknown=unknown)
    assert torch_releases.Version("2.15.0") not in found and unknown == ["2.15.0"]


@pytest.mark.parametrize("where", ["slow", "slow-headers"])
def test_one_deadline_per_request(index, where):
    """A server sending a byte every 0.2 s kept each read under the timeout, so it never ended."""
    Answers.pages[f"/{where}/torch/"] = ("text/html", b"<a href='x'>" + b" " * 200 + b"</a>")
    start = time.monotonic()
    with pytest.raises(BuildError, match="no complete answer within 1s"):
        torch_releases.releases(f"{index}/{where}", "3.11", timeout=1)
    assert time.monotonic() - start < 3


# --- keep the class out: any answer -------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12)
LABELS = st.sampled_from(["cu130", "cu131", "cu126", "cpu", "cu999", "cu127", "rocm6.2", "cu1", ""])
FILENAMES = st.one_of(
    st.builds(lambda v, label, arch: wheel(f"{v}+{label}" if label else v, arch),
              st.sampled_from(["2.15.0", "2.14.2", "2.16.0", "2." + "9" * 5000 + ".0", "3.0.0rc1",
                               "2.15.0.post1", "99999999999999.1.0"]), LABELS,
              st.sampled_from(["x86_64", "aarch64", "win_amd64"])),
    st.text(max_size=40))
URLS = st.sampled_from(["a.whl", "/files/a.whl", "file:///etc/hostname", "ftp://127.0.0.1/x",
                        "data:text/plain,Requires-Dist", "http://127.0.0.1:9/x.whl", "", "//x/y"])
FILES = st.fixed_dictionaries({"filename": FILENAMES, "url": URLS},
                              optional={"core-metadata": JSON_VALUES, "hashes": JSON_VALUES})
ANSWERS = st.one_of(
    st.builds(lambda files, extra: json.dumps({"files": files, **extra}).encode(),
              st.lists(FILES, max_size=6), st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=2)),
    st.builds(lambda v: json.dumps(v).encode(), JSON_VALUES),
    st.binary(max_size=200))
METADATA = st.one_of(st.sampled_from([b"Requires-Dist: cuda-toolkit==13.0.*\n",
                                      b"Requires-Dist: cuda-toolkit==99.9.*\n",
                                      b"Requires-Dist: nvidia-cuda-runtime==12.7.1\n", b"\xff\xfe"]),
                     st.binary(max_size=100))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=ANSWERS, ctype=st.sampled_from([JSON, "text/html", "application/json"]), meta=METADATA)
def test_any_answer_gives_releases_or_one_clean_error(index, body, ctype, meta):
    Answers.pages["/any/torch/"] = (ctype, body)
    Answers.pages["/any/torch/a.whl.metadata"] = ("text/plain", meta)
    Answers.pages["/files/a.whl.metadata"] = ("text/plain", meta)
    try:
        found = torch_releases.releases(f"{index}/any", "3.11", timeout=5)
    except BuildError as e:
        assert "\n" not in e.message, e.message
        assert e.message.startswith("cannot read") or "simple-API" in e.message \
            or "only http(s)" in e.message, e.message
        return
    for version, release in found.items():
        assert not version.is_prerelease and release.computes
        assert all(torch_releases.cuda_of_label(c) for c in release.computes), release.computes
        assert all(p <= {"linux-64", "linux-aarch64"} for p in release.computes.values())
