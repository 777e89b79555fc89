"""`kbuild matrix update` against a package index served on 127.0.0.1 with fabricated torch
releases: the PyTorch index's labelled wheels (PEP 691 JSON) and PyPI's default wheel with core
metadata (PEP 503 HTML + PEP 658). In process."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbuild.cli import app
from kbuild.core.errors import BuildError
from kbuild.matrix import matrix, torch_releases, update
from kbuild_testing import pixi_before_2_15

REPO = Path(__file__).resolve().parents[3]
SCHEMA = REPO / "tools" / "tests" / "data" / "pixi-manifest-schema-v0.77.0.json"


def wheel(version: str, arch: str = "x86_64", py: str = "cp311") -> str:
    return f"torch-{version}-{py}-{py}-manylinux_2_28_{arch}.whl"


PYTORCH_FILES = [wheel("2.14.1+cu130"), wheel("2.13.0+cpu"),
                 *[wheel(f"2.14.2+{c}") for c in ("cu126", "cu130", "cu132", "cpu")],
                 wheel("2.15.0+cu126"),
                 *[wheel(f"2.15.0+{c}", a) for c in ("cu130", "cu131", "cpu")
                   for a in ("x86_64", "aarch64")],
                 wheel("2.15.0+cu118"), wheel("2.15.0+rocm7.2"), wheel("2.15.0+cu140", py="cp313"),
                 wheel("2.16.0rc1+cu130"), "torch-2.15.0.tar.gz"]
PYPI_METADATA = ("Metadata-Version: 2.1\nName: torch\nVersion: 2.15.0\n"
                 "Requires-Dist: filelock\n"
                 'Requires-Dist: cuda-toolkit[cublas,cudart]==13.2.*; platform_system == "Linux"\n')


class Index(BaseHTTPRequestHandler):
    pages: dict[str, tuple[str, bytes]] = {}

    def do_GET(self):  # noqa: N802
        page = self.pages.get(self.path)
        if page is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", page[0])
        self.end_headers()
        self.wfile.write(page[1])

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def index():
    pytorch = {"meta": {"api-version": "1.1"}, "name": "torch",
               "files": [{"filename": f, "url": f"../../files/{f}", "hashes": {}} for f in PYTORCH_FILES]}
    pypi_wheel = wheel("2.15.0")
    Index.pages = {
        "/whl/torch/": ("application/vnd.pypi.simple.v1+json", json.dumps(pytorch).encode()),
        "/simple/torch/": ("text/html", (
            f'<html><body><a href="/files/{wheel("2.14.1")}#sha256=00">{wheel("2.14.1")}</a>'
            f'<a href="/files/{pypi_wheel}#sha256=11" data-core-metadata="sha256=22">{pypi_wheel}</a>'
            f'<a href="/files/{wheel("2.15.0", "win_amd64")}">win</a></body></html>').encode()),
        f"/files/{pypi_wheel}.metadata": ("text/plain", PYPI_METADATA.encode()),
    }
    server = ThreadingHTTPServer(("127.0.0.1", 0), Index)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def pixi(tmp_path) -> Path:
    return pixi_before_2_15(tmp_path)


def test_labelled_releases_by_flavour_and_platform(index):
    found = torch_releases.releases(f"{index}/whl", "3.11")
    release = found[torch_releases.Version("2.15.0")]
    assert release.computes == {"cu126": {"linux-64"}, "cu130": {"linux-64", "linux-aarch64"},
                                "cu131": {"linux-64", "linux-aarch64"},
                                "cpu": {"linux-64", "linux-aarch64"}, "cu118": {"linux-64"}}
    assert torch_releases.Version("2.16.0rc1") not in found  # pre-releases are not followed


def test_new_release_and_patch_are_added_in_the_files_style(index, pixi):
    mx = matrix.load(pixi)
    changes = update.plan(mx, torch_releases.releases(f"{index}/whl", "3.11", update.newer_than(mx)))
    assert changes.added == ["torch215-cu126", "torch215-cu130", "torch215-cu131", "torch215-cpu"]
    assert changes.bumped == ["2.14.1 -> 2.14.2"]  # cu118 is older than the matrix's oldest CUDA
    text = changes.text
    assert ('[feature.pt215-cu130.pypi-dependencies]\ntorch = { version = "==2.15.0", index = '
            '"https://download.pytorch.org/whl/cu130" }\n') in text
    assert ('torch215-cu126 = { features = ["pt215-cu126", "cuda126"], solve-group = '
            '"torch215-cu126", platforms = ["linux-64"] }\n') in text
    assert ('torch215-cpu = { features = ["pt215-cpu"], solve-group = "torch215-cpu", '
            'platforms = ["linux-64", "linux-aarch64"] }\n') in text
    # a toolkit feature for the new CUDA version, shaped like the newest one
    assert '[feature.cuda131.dependencies]\ncuda-version = "13.1.*"\ncuda-nvcc = "*"\n' in text
    assert '[feature.cuda131.activation.env]\nCUDA_HOME = "$CONDA_PREFIX"\n' in text
    assert '"==2.14.1"' not in text and text.count('"==2.14.2"') == 4
    # only additions and the moved pins: every other line is kept as it was
    old = pixi.read_text().splitlines()
    assert [ln for ln in old if ln not in text.splitlines()] == [
        ln for ln in old if '"==2.14.1"' in ln]
    pixi.write_text(text)
    new = matrix.load(pixi)
    assert [p for e in new.envs for p in matrix.name_problems(e)] == []
    assert new.get("torch215-cu131").cuda == "13.1"
    assert new.get("torch214-cu130").torch_version == "2.14.2"
    import jsonschema
    import tomllib
    errors = list(jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).iter_errors(
        tomllib.loads(text)))
    assert not errors, errors[0].message
    # and a second run finds nothing new
    again = update.plan(new, torch_releases.releases(f"{index}/whl", "3.11", update.newer_than(new)))
    assert again.text == text and not again.added


def test_pypi_default_wheel_flavour_from_core_metadata(index, pixi):
    mx = matrix.load(pixi)
    found = torch_releases.releases(f"{index}/simple", "3.11", update.newer_than(mx))
    assert {str(v): r.computes for v, r in found.items()} == {"2.15.0": {"cu132": {"linux-64"}}}
    changes = update.plan(mx, found)
    assert changes.added == ["torch215-cu132"] and "[feature.cuda132" not in changes.text.split(
        "[feature.pt215-cu132")[1]  # its toolkit feature exists already


def test_unlabelled_release_without_metadata_asks_the_resolver(index, pixi):
    mx = matrix.load(pixi)
    Index.pages["/nometa/torch/"] = ("text/html", f'<a href="/f/{wheel("2.15.0")}">x</a>'.encode())
    asked, unknown = [], []
    found = torch_releases.releases(f"{index}/nometa", "3.11", update.newer_than(mx),
                            resolver=lambda v: asked.append(str(v)) or "cu130")
    assert asked == ["2.15.0"] and found[torch_releases.Version("2.15.0")].computes == {"cu130": {"linux-64"}}
    torch_releases.releases(f"{index}/nometa", "3.11", update.newer_than(mx), unknown=unknown)
    assert unknown == ["2.15.0"]


def test_dry_run_prints_the_diff_and_changes_nothing(index, pixi):
    before = pixi.read_text()
    result = CliRunner().invoke(app, ["matrix", "update", "--matrix", str(pixi), "--index",
                                      f"{index}/whl", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "+torch215-cu130 = {" in result.output and '-torch = { version = "==2.14.1"' in result.output
    assert pixi.read_text() == before
    written = CliRunner().invoke(app, ["matrix", "update", "--matrix", str(pixi), "--index",
                                       f"{index}/whl"])
    assert written.exit_code == 0 and "added torch215-cpu" in written.output
    assert "torch215-cpu" in [e.name for e in matrix.load(pixi).envs]


def test_unreachable_index_is_a_clean_error(pixi):
    with pytest.raises(BuildError, match="cannot read http://127.0.0.1:9/torch/"):
        torch_releases.releases("http://127.0.0.1:9", "3.11", timeout=5)
