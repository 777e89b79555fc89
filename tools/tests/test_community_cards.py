"""kernels-community's projects (unchanged) published as their CI publishes them, kbuild in
kernel-builder's place: every project's CARD.md (a Jinja template) rendered as kernel-builder's
`fill-card` renders it, then sent to the Hub as README.md; relu (its CPU variant), sonic-moe and
triton-kernels (Triton, noarch) built and uploaded with `kbuild upload --repo-type kernel
--repo-id kernels-community/<name> --output-json …` (and, for a version-1 kernel, again with
`--branch main`), relu loaded back with `kernels`, and the JSON read by their own bot script.

The projects and their CI scripts are test input kept beside the checkout (../shared/corpus);
a clone without them skips these tests, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from huggingface_hub import CommitOperationAdd, HfApi, RepoCard, hf_hub_download

from kbuild.core import manifest as manifest_mod
from kbuild.publish import card
from kbuild_hub.server import HubServer
from kbuild_testing import REPO, shared_folder

pytest.importorskip("httpx2", reason="huggingface_hub's HTTP client (hub ≥ 1.x)")
CORPUS_DIR = REPO.parent / "shared" / "corpus"
PROJECTS = [CORPUS_DIR / f"kernels-community-40d4194f-{part}.tar.gz"
            for part in ("subset", "heavy", "noarch-gpu")]
CI = CORPUS_DIR / "kernels-community-40d4194f-ci.tar.gz"
pytestmark = pytest.mark.skipif(not all(p.is_file() for p in PROJECTS + [CI]), reason=(
    f"no kernels-community projects and CI scripts in {CORPUS_DIR} (test input kept beside the "
    "checkout, not in it)"))
TOKEN = "hf_community_cards_7a1e"
ORG = "kernels-community"
ALL = {"activation", "causal-conv1d", "mamba-ssm", "megablocks", "relu", "rotary", "tinygrad-rms",
       "deep-gemm", "flash-attn2", "flash-mla", "layer-norm", "paged-attention", "punica-sgmv",
       "sage-attention", "sonic-moe", "triton-kernels"}
# relu's CPU variant compiles in about a minute; the Triton projects are Python (noarch), their
# variant (torch-cuda) not loadable on a machine without CUDA, which upload says and goes on.
BUILT = {"relu": 0, "sonic-moe": 2, "triton-kernels": 2}  # -> the archive in PROJECTS


def extract(tarball: Path, root: Path, names: set[str] | None = None) -> None:
    with tarfile.open(tarball) as tar:
        tar.extractall(root, members=[m for m in tar.getmembers()
                                      if names is None or m.name.split("/")[0] in names],
                       filter="data")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("community")
    for tarball in PROJECTS:
        extract(tarball, root)
    return {p.name: p for p in sorted(root.iterdir()) if (p / "build.toml").is_file()}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """relu (its CPU variant), sonic-moe and triton-kernels built, once per test run."""
    def make(folder: Path) -> None:
        from kbuild.stages import pipeline
        for name, archive in BUILT.items():
            extract(PROJECTS[archive], folder, {name})
            pipeline.build(folder / name, backends=["cpu"] if name == "relu" else None)
    folder = shared_folder("community-cards-cpu", make,
                           lambda: tmp_path_factory.mktemp("community-built"))
    return {name: folder / name for name in BUILT}


@pytest.fixture(scope="module")
def hub():
    with HubServer(token=TOKEN) as server:
        yield server


def test_every_card_renders_as_kernel_builders_fill_card(corpus):
    assert set(corpus) == ALL
    minijinja = pytest.importorskip("minijinja", reason="minijinja (the test extra) compares "
                                                         "renderings")
    for name, project in corpus.items():
        manifest = manifest_mod.load(project)
        text = card.project_card(project)  # what `kbuild card` prints
        assert not any(mark in text for mark in ("{{", "{%", "{#")), name
        assert RepoCard(text).data.to_dict() == {  # the client's own reader of the front matter
            "library_name": "kernels", "license": manifest.general.license.lower()}, name
        assert f"repository card of {ORG}/{name} " in text, name
        variables = card.card_variables(project, manifest)
        if variables["functions"]:
            assert f"{variables['functions'][0]} = kernel_module.{variables['functions'][0]}" \
                in text, name
        theirs = minijinja.Environment(trim_blocks=True, pycompat=False).render_str(
            (project / "CARD.md").read_text(), **variables)
        assert text == theirs, name  # byte for byte kernel-builder's renderer's text


def test_every_rendered_card_reaches_the_hub_as_readme(corpus, hub, tmp_path):
    """The README.md each upload sends (the same function renders it), committed with the real
    client to a kernel repo, read back by it."""
    api = HfApi(endpoint=hub.url, token=TOKEN)
    for name, project in corpus.items():
        repo = f"{ORG}/{name}"
        readme, source = card.card_text(project, manifest_mod.load(project), repo, [])
        assert source == "CARD.md"
        api.create_repo(repo, repo_type="kernel", exist_ok=True)
        api.create_commit(repo, repo_type="kernel", commit_message="card", operations=[
            CommitOperationAdd("README.md", readme.encode())])
        path = hf_hub_download(repo, "README.md", repo_type="kernel", endpoint=hub.url,
                               token=TOKEN, cache_dir=tmp_path / "hf")
        assert Path(path).read_text() == readme
        assert RepoCard.load(path).data.to_dict()["library_name"] == "kernels"


@pytest.mark.slow
def test_three_upload_as_their_ci_uploads_them(built, hub, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "KERNELS_"))}
    env.pop("LOCAL_KERNELS", None)
    env.update(HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN, HF_HOME=str(tmp_path / "hf_home"),
               COLUMNS="400")
    out = tmp_path / "runner-temp"
    out.mkdir()

    def kbuild(project: Path, *args: str) -> subprocess.CompletedProcess:
        # their step: `cd "$KERNEL" && kernel-builder upload --repo-type kernel $TARGET_FLAG ...`
        return subprocess.run([sys.executable, "-m", "kbuild", "upload", "--repo-type", "kernel",
                               *args], cwd=project, env=env, capture_output=True, text=True,
                              timeout=600)

    for name, project in built.items():
        general = manifest_mod.load(project).general
        branch = general.hub.branch or f"v{general.version}"  # sonic-moe names its own
        summary = out / f"upload-{name}.json"
        done = kbuild(project, "--repo-id", f"{ORG}/{name}", "--output-json", str(summary))
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        url = f"{hub.url}/kernels/{ORG}/{name}/tree/{branch}"
        assert done.stdout.splitlines()[-1] == f"Kernel uploaded: {url}"
        data = json.loads(summary.read_text())
        assert (data["status"], data["branch"], data["url"]) == ("uploaded", branch, url)
        if general.version == 1 and not general.hub.branch:  # their "v1 kernels to main" step
            main = out / f"upload-main-{name}.json"
            done = kbuild(project, "--repo-id", f"{ORG}/{name}", "--branch", "main",
                          "--output-json", str(main))
            assert done.returncode == 0, done.stderr[-3000:]
            assert json.loads(main.read_text())["branch"] == "main"

        readme = hub.files(f"{ORG}/{name}")["README.md"].decode()
        assert readme == card.project_card(project) and "{%" not in readme
        files = hub.files(f"{ORG}/{name}", revision=branch)
        (variant,) = [p.name for p in (project / "build").iterdir() if p.is_dir()]
        assert f"build/{variant}/metadata.json" in files
        # the API is recorded where the variant loads here (not a CUDA variant without CUDA)
        assert (f"api/{variant}.json" in files) == (name == "relu"), name
        if name != "relu":
            assert f"api: {variant}: no API recorded: cannot load it here" in done.stdout, name

    loaded = subprocess.run([sys.executable, "-c", (
        "import torch, kernels\n"
        f"relu = kernels.get_kernel('{ORG}/relu', version=1)\n"
        "x = torch.tensor([-1.0, 2.0])\n"
        "print('relu', relu.relu(x).tolist())\n"
        f"main = kernels.get_kernel('{ORG}/relu', revision='main')\n"
        "print('main', main.relu(x).tolist())\n")], env=env, capture_output=True, text=True,
        timeout=300)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert loaded.stdout.splitlines() == ["relu [0.0, 2.0]", "main [0.0, 2.0]"]

    ci = tmp_path / "ci"
    extract(CI, ci)
    kernel_dir = ci / "relu"  # their helper reads <kernel>/build.toml from the working folder
    kernel_dir.mkdir()
    (kernel_dir / "build.toml").write_bytes((built["relu"] / "build.toml").read_bytes())
    bot = subprocess.run([sys.executable, str(ci / ".github" / "scripts" /
                                              "format_hub_upload_comment.py"), "relu", ORG,
                          str(out / "upload-relu.json"), str(out / "upload-main-relu.json")],
                         cwd=ci, capture_output=True, text=True, timeout=60)
    assert bot.returncode == 0, bot.stderr
    assert bot.stdout.splitlines() == ["Hub uploads:", f"- Hub repo: https://huggingface.co/"
                                                       f"kernels/{ORG}/relu"]
