"""`kbuild lock --check` re-derives each lock from its inputs with the real uv and compares the
package sets (issue 21, item 2): a lock with an extra package, a changed hash or another marker
fails it, as does a malformed one; a lock as written passes, also once the index has newer
releases. The index is a simple-API server on 127.0.0.1 serving small wheels made here."""

from __future__ import annotations

import hashlib
import io
import threading
import tomllib
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import tomli_w

from kbuild_testing import kbuild

ENV = "torch213-cpu"
LOCK = Path("locks") / "linux-64" / f"pylock.{ENV}.toml"
PIXI = """[workspace]
name = "tiny"
channels = ["conda-forge"]
platforms = ["linux-64"]

[dependencies]
python = "3.11.*"

[pypi-dependencies]
helper = "==1.0"

[feature.pt213-cpu.pypi-dependencies]
torch = { version = "==2.13.0", index = "https://download.pytorch.org/whl/cpu" }

[environments]
torch213-cpu = { features = ["pt213-cpu"], solve-group = "torch213-cpu" }
"""


def wheel(name: str, version: str, requires: tuple[str, ...] = ()) -> tuple[str, bytes]:
    """A minimal pure-Python wheel: (file name, bytes)."""
    dist = f"{name}-{version}"
    files = {f"{name}/__init__.py": "",
             f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
             + "".join(f"Requires-Dist: {r}\n" for r in requires),
             f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                        "Tag: py3-none-any\n"}
    record = "".join(f"{p},,\n" for p in files) + f"{dist}.dist-info/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for path, text in {**files, f"{dist}.dist-info/RECORD": record}.items():
            z.writestr(path, text)
    return f"{dist}-py3-none-any.whl", buf.getvalue()


class Index(BaseHTTPRequestHandler):
    files: dict[str, dict[str, bytes]] = {}  # project -> {file name: bytes}

    def do_HEAD(self):  # noqa: N802  (uv asks whether a wheel can be read in ranges: no)
        self.head_only = True
        self.do_GET()

    def do_GET(self):  # noqa: N802
        parts = self.path.strip("/").split("/")
        if parts[:3] == ["whl", "cpu", "torch"]:  # the PyTorch index's torch page
            parts = ["simple", "torch"]
        elif parts[0] == "notorch":  # an index without torch
            parts = parts[1:] if parts[-1] != "torch" else ["-"]
        if parts[0] == "simple" and len(parts) == 2 and parts[1] in self.files:
            links = "".join(f'<a href="/files/{f}#sha256={hashlib.sha256(b).hexdigest()}">{f}</a>\n'
                            for f, b in self.files[parts[1]].items())
            self._send("text/html", f"<html><body>{links}</body></html>".encode())
            return
        for project in self.files.values():
            if parts[0] == "files" and len(parts) == 2 and parts[1] in project:
                self._send("application/octet-stream", project[parts[1]])
                return
        self.send_error(404)

    def _send(self, ctype: str, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not getattr(self, "head_only", False):
            self.wfile.write(body)

    def log_message(self, *args):
        pass


def publish(*wheels: tuple[str, bytes]) -> None:
    for name, data in wheels:
        Index.files.setdefault(name.split("-")[0], {})[name] = data


@pytest.fixture(scope="module")
def index():
    Index.files = {}
    publish(wheel("torch", "2.13.0+cpu", ("tinydep>=1.0",)), wheel("helper", "1.0"),
            wheel("tinydep", "1.0"), wheel("tinydep", "1.1"), wheel("other", "2.0"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()


@pytest.fixture(scope="module")
def locked(index, tmp_path_factory):
    """A project whose one environment `kbuild lock` locked against the index."""
    root = tmp_path_factory.mktemp("tiny")
    (root / "pixi.toml").write_text(PIXI)
    proc = run("lock", "--project", root, index=index)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = tomllib.loads((root / LOCK).read_text())
    assert {p["name"]: p["version"] for p in doc["packages"]} == {
        "helper": "1.0", "tinydep": "1.1", "torch": "2.13.0+cpu"}
    return root


def run(*args, index: str, find_links: str = ""):
    """The CLI, seeing only the index (no pip configuration of this machine, no other index)."""
    return kbuild(*args, env={"PIP_CONFIG_FILE": "/dev/null", "PIP_INDEX_URL": index,
                              "PIP_FIND_LINKS": find_links, "PIP_EXTRA_INDEX_URL": "",
                              "UV_NO_CONFIG": "1", "KBUILD_INSTALLER": "uv"}, timeout=300)


def check(root: Path, index: str):
    return run("lock", "--check", "--project", root, "--platform", "linux-64", index=index)


def tampered(locked: Path, tmp_path: Path, change) -> Path:
    root = tmp_path / "p"
    (root / LOCK.parent).mkdir(parents=True)
    (root / "pixi.toml").write_text(PIXI)
    doc = tomllib.loads((locked / LOCK).read_text())
    change(doc)
    (root / LOCK).write_text(tomli_w.dumps(doc))
    return root


def package(doc: dict, name: str) -> dict:
    return next(p for p in doc["packages"] if p["name"] == name)


def test_a_lock_as_written_passes_even_when_the_index_moves_on(locked, index):
    publish(wheel("tinydep", "1.2"))  # a newer release: not the lock's business
    proc = check(locked, index)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _extra_package(doc):
    other = dict(package(doc, "helper"), name="other", version="2.0")
    other["wheels"] = [dict(other["wheels"][0], hashes={
        "sha256": hashlib.sha256(Index.files["other"]["other-2.0-py3-none-any.whl"]).hexdigest()})]
    doc["packages"].append(other)


def _changed_hash(doc):
    package(doc, "tinydep")["wheels"][0]["hashes"]["sha256"] = "0" * 64


def _marker(doc):
    package(doc, "helper")["marker"] = "python_version >= '3.11'"


def _newline_marker(doc):
    package(doc, "helper")["marker"] = "sys_platform == 'linux'\n--extra-index-url http://127.0.0.1:9/"


def _missing(doc):
    doc["packages"] = [p for p in doc["packages"] if p["name"] != "tinydep"]


def _older(doc):
    package(doc, "tinydep")["version"] = "1.0"


@pytest.mark.parametrize("change, words", [
    (_extra_package, "other 2.0 is not part of what its inputs resolve to"),
    (_changed_hash, f"tinydep 1.1: sha256 {'0' * 64} is not a file of it on the index"),
    (_marker, "helper: marker \"python_version >= '3.11'\" differs"),
    (_newline_marker, "packages[0].marker"),
    (_missing, "is missing"),  # tinydep, at the newest release the index has
    (_older, "tinydep 1.0: sha256"),  # the 1.1 file's hash under 1.0's pin
], ids=["extra package", "changed hash", "marker", "marker with a newline", "missing", "version"])
def test_a_changed_lock_fails_check(locked, index, tmp_path, change, words):
    root = tampered(locked, tmp_path, change)
    proc = check(root, index)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert words in " ".join((proc.stdout + proc.stderr).split()), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_torch_wheel_locked_from_a_local_folder_is_checked_at_its_pytorch_index(index, tmp_path):
    """Locked where torch's `+cpu` wheel lay in pip's find-links (recorded at the environment's
    PyTorch index), checked where it does not (CI): the index's torch page is asked for torch."""
    server = index.removesuffix("/simple")
    root = tmp_path / "p"
    root.mkdir()
    (root / "pixi.toml").write_text(PIXI.replace("https://download.pytorch.org/whl/cpu",
                                                 f"{server}/whl/cpu"))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    name, data = next(iter(Index.files["torch"].items()))
    (wheels / name).write_bytes(data)
    locked = run("lock", "--project", root, index=f"{server}/notorch/simple", find_links=str(wheels))
    assert locked.returncode == 0, locked.stdout + locked.stderr
    torch = package(tomllib.loads((root / LOCK).read_text()), "torch")
    assert torch["wheels"][0]["url"].startswith(f"{server}/whl/cpu/torch-2.13.0")
    proc = run("lock", "--check", "--project", root, "--platform", "linux-64",
               index=f"{server}/notorch/simple")
    assert proc.returncode == 0, proc.stdout + proc.stderr
