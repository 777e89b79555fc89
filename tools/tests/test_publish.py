"""`kbuild upload` against the test Hub server, consumed by the real `kernels` clients."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
from huggingface_hub import CommitOperationAdd, HfApi, RepoCard, hf_hub_download
from huggingface_hub.errors import HfHubHTTPError

from kbuild_testing import as_variant, fresh_copy
from kbuild.publish import hub as hub_client
from kbuild.publish import upload as publish
from kbuild.core.errors import BuildError
from kbuild_hub.server import HubServer

httpx2 = pytest.importorskip("httpx2", reason="huggingface_hub's HTTP client (hub ≥ 1.x)")

TOKEN = "hf_publish_test_token_5f1c"
REPO = "kernels-test/img2gray"  # build.toml's [general.hub] repo-id; an org, so the trust check works


# ----------------------------------------------------------------------------- builds and copies


@pytest.fixture
def proj(builds, tmp_path) -> Path:
    return fresh_copy(builds(), tmp_path / "img2gray")


def variant_of(project: Path) -> Path:
    (variant,) = [p for p in (project / "build").iterdir() if p.is_dir()]
    return variant


@pytest.fixture
def hub():
    with HubServer(token=TOKEN) as server:
        yield server


@pytest.fixture
def api(hub):
    return HfApi(endpoint=hub.url, token=TOKEN)


def do_upload(hub: HubServer, project: Path, **kw) -> tuple[publish.UploadResult, list[str]]:
    """In-process upload (no load check: the CLI tests cover it), fast backoff."""
    logs: list[str] = []
    kw.setdefault("load", False)
    options = publish.UploadOptions(endpoint=hub.url, token=TOKEN, backoff=0.01, **kw)
    result = publish.upload(project, options, log=logs.append, warn=logs.append)
    return result, logs


def client_env(hub: HubServer, tmp_path: Path, token: str | None = TOKEN) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE_", "KERNELS_"))}
    env.pop("LOCAL_KERNELS", None)
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf_home"))
    if token:
        env["HF_TOKEN"] = token
    return env


def kbuild_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kbuild", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=300)


def kernels_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "kernels"), *args], env=env,
                          capture_output=True, text=True, timeout=120)


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)


CHECK_OP = """\
import torch


def check(k):
    x = torch.randint(0, 256, (7, 9, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    ref = (x.float()[..., 0] * 0.21 + x.float()[..., 1] * 0.72 + x.float()[..., 2] * 0.07).to(torch.uint8)
    assert torch.equal(k.img2gray(x), ref)
    print("OK", k.__name__, getattr(k, "KERNEL_MARKER", None))
"""


def script(body: str) -> str:
    """`body` (dedented) after a `check(k)` that runs the op against the PyTorch reference."""
    return CHECK_OP + textwrap.dedent(body)


def writes(hub: HubServer, since: int = 0) -> list[tuple[str, str, int]]:
    """Requests to write routes the server got (from request number `since` on)."""
    def is_write(method: str, target: str) -> bool:
        route, _ = hub.route_for(method, target.split("?")[0])
        return route.writes if route else method not in ("GET", "HEAD")
    return [r for r in hub.requests[since:] if is_write(r[0], r[1])]


def v1_files(hub: HubServer, revision: str = "v1") -> dict[str, bytes]:
    return hub.files(REPO, revision=revision)


# ----------------------------------------------------------------------------- upload + consumers


def test_cli_upload_then_get_kernel_versions_info_and_trust(hub, proj, tmp_path):
    (proj / "benchmarks").mkdir()
    (proj / "benchmarks" / "benchmark_img2gray.py").write_text("# a benchmark script\n")
    (proj / "benchmarks" / "helper.py").write_text("# not uploaded\n")
    env = client_env(hub, tmp_path)
    summary = tmp_path / "out" / "upload.json"
    result = kbuild_cli("upload", proj, "--output-json", summary, env=env)
    assert result.returncode == 0, result.stderr
    assert TOKEN not in result.stdout + result.stderr

    data = json.loads(summary.read_text())
    variant = variant_of(proj).name
    head = hub.repo_commits(REPO, branch="v1")[0]
    assert data["status"] == "uploaded" and data["repo_id"] == REPO and data["branch"] == "v1"
    assert data["url"] == f"{hub.url}/kernels/{REPO}/tree/v1" and data["pull_requests"] == []
    assert data["commit"] == head and data["commit_url"].endswith(f"/kernels/{REPO}/commit/{head}")
    assert data["pr_url"] is None and data["deleted"] == [] and data["unchanged"] == []
    assert sorted(data["added"]) == sorted(
        [f"build/{variant}/{p.name}" for p in variant_of(proj).iterdir()]
        + ["benchmarks/benchmark_img2gray.py", f"api/{variant}.json"])  # the API it was loaded with
    assert result.stdout.splitlines()[-1] == f"Kernel uploaded: {hub.url}/kernels/{REPO}/tree/v1"
    assert len(hub.repo_commits(REPO, branch="v1")) == 2  # initial + exactly one upload commit

    files = v1_files(hub)
    for p in variant_of(proj).iterdir():
        assert files[f"build/{variant}/{p.name}"] == p.read_bytes()
    assert "benchmarks/helper.py" not in files
    # The generated card is README.md on main: functions, variants, how to load.
    readme = hub.files(REPO)["README.md"].decode()
    assert readme.startswith("---\nlicense: apache-2.0\n")
    assert "`img2gray(image: torch.Tensor) -> torch.Tensor`" in readme and "img2gray_out" in readme
    assert f"- `{variant}`" in readme and f'get_kernel("{REPO}", version=1)' in readme
    assert "README.md" not in files  # the version branch was cut from main before the card

    loaded = run_python(script(f"""
        import kernels
        check(kernels.get_kernel("{REPO}", version=1))
        print("HAS", kernels.has_kernel("{REPO}", version=1))
        """), env)
    assert loaded.returncode == 0, loaded.stderr
    assert "OK _img2gray_cpu_" in loaded.stdout and "HAS True" in loaded.stdout
    assert ("GET", "/api/organizations/kernels-test/overview", 200) in hub.requests

    info = kernels_cli("info", REPO, "--version", "1", "--json", env=env)
    assert info.returncode == 0, info.stderr
    described = json.loads(info.stdout)
    assert described["name"] == "img2gray" and described["version"] == 1 and described["backends"] == ["cpu"]

    # Untrusted publisher: refused unless trust_remote_code=True.
    hub.trusted_publisher = False
    env["HF_HOME"] = str(tmp_path / "hf_home_untrusted")
    untrusted = run_python(script(f"""
        import kernels
        try:
            kernels.get_kernel("{REPO}", version=1)
        except ValueError as e:
            print("REFUSED", e)
        check(kernels.get_kernel("{REPO}", version=1, trust_remote_code=True))
        """), env)
    assert untrusted.returncode == 0, untrusted.stderr
    assert "REFUSED Kernel repository 'kernels-test/img2gray' is not from a trusted publisher" in untrusted.stdout
    assert "OK _img2gray_cpu_" in untrusted.stdout
    assert not hub.unknown_routes


def test_lock_download_and_offline_load(hub, proj, tmp_path):
    result, _ = do_upload(hub, proj)
    consumer = tmp_path / "consumer"
    consumer.mkdir()
    (consumer / "pyproject.toml").write_text(
        f'[project]\nname = "consumer"\nversion = "0.1"\n\n[tool.kernels.dependencies]\n"{REPO}" = 1\n')
    env = client_env(hub, tmp_path, token=None)
    locked = kernels_cli("lock", str(consumer), env=env)
    assert locked.returncode == 0, locked.stderr
    lock = json.loads((consumer / "kernels.lock").read_text())
    assert lock == [{"dependency": {"repo-id": REPO, "version": 1}, "lock": {"commit": result.commit}}]
    downloaded = kernels_cli("download", str(consumer), env=env)
    assert downloaded.returncode == 0, downloaded.stderr
    # Sharp edge: with huggingface_hub >= 1.26 an offline load needs the whole
    # snapshot of the locked commit cached, not just the variant `kernels download` fetched.
    full = subprocess.run([str(Path(sys.executable).parent / "hf"), "download", REPO, "--repo-type", "kernel",
                           "--revision", result.commit], env=env, capture_output=True, text=True, timeout=120)
    assert full.returncode == 0, full.stderr
    assert not hub.unknown_routes

    hub.stop()
    env["HF_HUB_OFFLINE"] = "1"
    offline = run_python(script(f"""
        from pathlib import Path
        import kernels
        lockfile = Path({str(consumer / 'kernels.lock')!r})
        check(kernels.load_kernel("{REPO}", lockfile=lockfile))
        check(kernels.get_locked_kernel("{REPO}", lockfile=lockfile))
        """), env)
    assert offline.returncode == 0, offline.stderr
    assert offline.stdout.count("OK _img2gray_cpu_") == 2


def test_second_major_version_and_stale_variant_files(hub, builds, tmp_path, api):
    v1 = fresh_copy(builds(), tmp_path / "v1")
    first, _ = do_upload(hub, v1)
    old_so = next(p.name for p in variant_of(v1).iterdir() if p.suffix == ".so")

    # The same version rebuilt from changed sources: a new kernel id, so a new .so name.
    # A file nobody builds any more sits in the variant folder; another variant is not ours.
    api.create_commit(REPO, repo_type="kernel", revision="v1", commit_message="stray", operations=[
        CommitOperationAdd(f"build/{variant_of(v1).name}/stale.txt", b"old"),
        CommitOperationAdd("build/torch212-cxx11-cpu-x86_64-linux/metadata.json", b"{}"),
    ])
    changed = fresh_copy(builds("marked", marker="v1b"), tmp_path / "v1b")
    new_so = next(p.name for p in variant_of(changed).iterdir() if p.suffix == ".so")
    assert new_so != old_so
    before = hub.repo_commits(REPO, branch="v1")
    second, logs = do_upload(hub, changed)
    assert hub.repo_commits(REPO, branch="v1")[1:] == before  # exactly one new commit
    prefix = f"build/{variant_of(changed).name}/"
    assert sorted(second.deleted) == [prefix + old_so, prefix + "stale.txt"]
    assert prefix + new_so in second.added and prefix + "_ops.py" in second.changed
    files = v1_files(hub)
    assert sorted(p for p in files if p.startswith(prefix)) == sorted(
        prefix + p.name for p in variant_of(changed).iterdir())
    assert "build/torch212-cxx11-cpu-x86_64-linux/metadata.json" in files  # other variants are left alone

    # Idempotent: the same upload again makes no commit anywhere.
    main_before, v1_before = hub.repo_commits(REPO), hub.repo_commits(REPO, branch="v1")
    n_requests = len(hub.requests)
    again, logs = do_upload(hub, changed)
    assert again.status == "no_changes" and again.commit is None and again.readme["state"] == "unchanged"
    assert sorted(again.unchanged) == sorted(second.added + second.changed + second.unchanged)
    assert hub.repo_commits(REPO) == main_before and hub.repo_commits(REPO, branch="v1") == v1_before
    assert any("is up to date" in line for line in logs)
    assert writes(hub, n_requests) == []

    # Version 2 goes to branch v2; pinning version=1 still gives the v1 kernel.
    v2 = fresh_copy(builds("v2", version=2, marker="two"), tmp_path / "v2")
    third, _ = do_upload(hub, v2)
    assert third.branch == "v2" and hub.repo_commits(REPO, branch="v1") == v1_before
    env = client_env(hub, tmp_path)
    both = run_python(script(f"""
        import kernels
        for version in (1, 2):
            check(kernels.get_kernel("{REPO}", version=version))
        """), env)
    assert both.returncode == 0, both.stderr
    lines = [line for line in both.stdout.splitlines() if line.startswith("OK")]
    assert lines[0].endswith(" v1b") and lines[1].endswith(" two")
    versions = kernels_cli("versions", REPO, env=env)
    assert versions.returncode == 0, versions.stderr
    assert "Version 1" in versions.stdout and "Version 2" in versions.stdout
    assert variant_of(v2).name in versions.stdout
    assert first.commit != third.commit


# ----------------------------------------------------------------------------- PRs, dry runs, tags


def test_create_pr_leaves_branches_alone(hub, proj, api):
    do_upload(hub, proj)
    variant = variant_of(proj).name
    api.create_commit(REPO, repo_type="kernel", revision="v1", commit_message="stray",
                      operations=[CommitOperationAdd(f"build/{variant}/stale.txt", b"old")])
    (proj / "CARD.md").write_text("---\nlicense: apache-2.0\n---\n# img2gray\nHand-written card.\n")
    main_before, v1_before = hub.repo_commits(REPO), hub.repo_commits(REPO, branch="v1")
    result, logs = do_upload(hub, proj, create_pr=True)
    assert hub.repo_commits(REPO) == main_before and hub.repo_commits(REPO, branch="v1") == v1_before
    assert result.status == "pull_request_created" and result.deleted == [f"build/{variant}/stale.txt"]
    assert result.url is None
    assert result.pr_url == f"{hub.url}/kernels/{REPO}/discussions/1"
    assert result.readme["pr_url"] == f"{hub.url}/kernels/{REPO}/discussions/2"
    assert f"build/{variant}/stale.txt" not in hub.files(REPO, revision="refs/pr/1")
    # CARD.md rendered as kernel-builder renders it (its final newline dropped, as minijinja does)
    assert hub.files(REPO, revision="refs/pr/2")["README.md"] == (proj / "CARD.md").read_bytes()[:-1]
    assert any("opened pull request" in line for line in logs)
    # What CI bots read: upstream's JSON field and its stdout line.
    assert result.to_json()["pull_requests"] == [
        {"branch": "v1", "url": f"{hub.url}/kernels/{REPO}/discussions/1"},
        {"branch": "main", "url": f"{hub.url}/kernels/{REPO}/discussions/2"}]
    assert f"Pull request created: {hub.url}/kernels/{REPO}/discussions/1" in logs


def test_branch_main_as_kernels_communitys_release_job_uploads_version_1(hub, proj, tmp_path, api):
    """`--branch main` puts the variants on main (besides README.md), creates no v1, and the
    JSON says so; get_kernel(revision="main") loads them. A bad name is refused first."""
    env = client_env(hub, tmp_path)
    bad = kbuild_cli("upload", proj, "--branch", "../v1", env=env)
    assert bad.returncode == 2 and "--branch '../v1' is not a branch name" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr and writes(hub) == []
    summary = tmp_path / "main.json"
    done = kbuild_cli("upload", proj, "--branch", "main", "--output-json", summary, env=env)
    assert done.returncode == 0, done.stderr
    data = json.loads(summary.read_text())
    assert data["branch"] == "main" and data["status"] == "uploaded"
    assert data["pull_requests"] == [] and data["url"] == f"{hub.url}/kernels/{REPO}/tree/main"
    assert len(hub.repo_commits(REPO)) == 2  # the variants and README.md in one commit
    branches = {b.name for b in api.list_repo_refs(REPO, repo_type="kernel").branches}
    assert branches == {"main"}
    files = hub.files(REPO, revision="main")
    variant = variant_of(proj).name
    assert files[f"build/{variant}/metadata.json"] == (variant_of(proj) / "metadata.json").read_bytes()
    assert "README.md" in files
    loaded = run_python(script(f"""
        import kernels
        check(kernels.get_kernel("{REPO}", revision="main"))
    """), env)
    assert loaded.returncode == 0 and "OK" in loaded.stdout, loaded.stderr


def test_dry_run_writes_nothing(hub, proj, tmp_path, api):
    env = client_env(hub, tmp_path)
    summary = tmp_path / "dry.json"
    fresh = kbuild_cli("upload", proj, "--dry-run", "--output-json", summary, env=env)
    assert fresh.returncode == 0, fresh.stderr
    variant = variant_of(proj).name
    assert "would create kernel repo kernels-test/img2gray" in fresh.stdout
    assert f"add     build/{variant}/_ops.py" in fresh.stdout and "README.md on main: add" in fresh.stdout
    assert writes(hub) == []
    assert not api.repo_exists(REPO, repo_type="kernel")
    assert json.loads(summary.read_text())["status"] == "dry_run"

    do_upload(hub, proj)
    api.create_commit(REPO, repo_type="kernel", revision="v1", commit_message="stray",
                      operations=[CommitOperationAdd(f"build/{variant}/stale.txt", b"old")])
    (proj / "CARD.md").write_text("# img2gray\n")
    n_requests = len(hub.requests)
    main_before, v1_before = hub.repo_commits(REPO), hub.repo_commits(REPO, branch="v1")
    again = kbuild_cli("upload", proj, "--dry-run", env=env)
    assert again.returncode == 0, again.stderr
    assert f"delete  build/{variant}/stale.txt" in again.stdout and "README.md on main: change" in again.stdout
    # the first upload did not load the variant (load=False): its API record comes now
    assert "1 added, 0 changed, 1 deleted" in again.stdout and f"add     api/{variant}.json" in again.stdout
    assert writes(hub, n_requests) == []
    assert hub.repo_commits(REPO) == main_before and hub.repo_commits(REPO, branch="v1") == v1_before


def test_release_tag_and_private_repo(hub, proj, api):
    result, logs = do_upload(hub, proj, tag="v1.2.3", private=True)
    assert api.repo_info(REPO, repo_type="kernel").private is True
    assert "created kernel repo kernels-test/img2gray (private)" in logs
    tags = {t.name: t.target_commit for t in api.list_repo_refs(REPO, repo_type="kernel").tags}
    assert tags == {"v1.2.3": result.commit} and result.tag == "v1.2.3"
    again, _ = do_upload(hub, proj, tag="v1.2.3")  # nothing changed: the tag already points there
    assert again.commit is None and again.tag == "v1.2.3"
    api.create_commit(REPO, repo_type="kernel", revision="v1", commit_message="other",
                      operations=[CommitOperationAdd("notes.txt", b"n")])
    with pytest.raises(BuildError, match="tag v1.2.3 already exists"):
        do_upload(hub, proj, tag="v1.2.3")
    with pytest.raises(BuildError, match="does not belong to version 1"):
        do_upload(hub, proj, tag="v2.0.0")
    with pytest.raises(BuildError, match="not a full release tag"):
        do_upload(hub, proj, tag="latest")


def test_existing_tag_elsewhere_fails_before_any_write(hub, builds, tmp_path):
    do_upload(hub, fresh_copy(builds(), tmp_path / "base"), tag="v1.0.0")
    changed = fresh_copy(builds("marked", marker="v1b"), tmp_path / "changed")
    before, n_requests = hub.snapshot(), len(hub.requests)
    summary = tmp_path / "upload.json"
    for dry_run in (True, False):
        with pytest.raises(BuildError, match="tag v1.0.0 already exists .*this upload would "
                                             "commit 1 added, 3 changed and 1 deleted"):
            do_upload(hub, changed, tag="v1.0.0", dry_run=dry_run, output_json=summary)
    assert writes(hub, n_requests) == [] and hub.snapshot() == before and not summary.exists()
    result, logs = do_upload(hub, changed, tag="v1.1.0")
    tags = {t: c for t, c in hub.snapshot()["repos"][f"kernel:{REPO}"]["tags"].items()}
    assert tags["v1.1.0"] == result.commit != tags["v1.0.0"]
    assert [line for line in logs if "tagged" in line or "README" in line][0].startswith("tagged")


def test_read_only_token_fails_before_any_write(builds, tmp_path):
    read_only = "hf_read_only_token_5e0a"
    with HubServer(token=TOKEN, read_token=read_only) as server:
        project = fresh_copy(builds(), tmp_path / "img2gray")
        options = publish.UploadOptions(endpoint=server.url, token=read_only, load=False,
                                        backoff=0.01, tag="v1.0.0")
        with pytest.raises(BuildError, match="token is read-only; nothing was written"):
            publish.upload(project, options, log=lambda _: None, warn=lambda _: None)
        assert writes(server) == [] and server.snapshot()["repos"] == {}


def test_endpoint_credentials_are_never_printed_or_written(hub, proj, tmp_path):
    secret = "hf_in_the_url_41c9"
    endpoint = hub.url.replace("http://", f"http://user:{secret}@")
    summary, logs = tmp_path / "upload.json", []
    result = publish.upload(proj, publish.UploadOptions(
        endpoint=endpoint, token=TOKEN, dry_run=True, load=False, output_json=summary),
        log=logs.append, warn=logs.append)
    assert result.url.startswith("http://***@127.0.0.1:")
    assert secret not in summary.read_text() + "\n".join(logs) + result.url


# ----------------------------------------------------------------------------- refusals


def test_refuses_empty_mixed_and_wrong_version_build_folders(proj):
    variant = variant_of(proj)
    other = variant.with_name("torch212-cxx11-cpu-x86_64-linux")
    shutil.copytree(variant, other)
    meta = json.loads((other / "metadata.json").read_text())
    (other / "metadata.json").write_text(json.dumps({**meta, "version": 2}))
    with pytest.raises(BuildError, match="mixes kernel versions"):
        publish.upload(proj, publish.UploadOptions(dry_run=True, load=False))
    shutil.rmtree(other)

    toml = proj / "build.toml"
    toml.write_text(toml.read_text().replace("version = 1", "version = 3"))
    with pytest.raises(BuildError, match="the variants are version 1 but build.toml says 3"):
        publish.upload(proj, publish.UploadOptions(dry_run=True, load=False))
    toml.write_text(toml.read_text().replace("version = 3", "version = 1"))

    empty = proj / "empty"
    empty.mkdir()
    with pytest.raises(BuildError, match="no variants to upload"):
        publish.upload(proj, publish.UploadOptions(build_dir=empty, dry_run=True, load=False))


def test_skips_variants_failing_check(hub, proj):
    variant = variant_of(proj)
    (variant / "__pycache__").mkdir()  # bytecode is never uploaded, so it does not fail a variant
    (variant / "__pycache__" / "_ops.cpython-311.pyc").write_bytes(b"junk")
    broken = as_variant(variant, "torch212-cxx11-cpu-x86_64-linux")
    (broken / "__init__.py").write_text("# edited after the build\n")
    result, logs = do_upload(hub, proj)
    assert result.variants == [variant.name]
    assert result.skipped == {broken.name: ["digest: __init__.py has changed since the build"]}
    assert not any(p.startswith(f"build/{broken.name}/") for p in v1_files(hub))
    assert not any("__pycache__" in p for p in v1_files(hub))
    assert any(line.startswith(f"skipping {broken.name}") for line in logs)


def _git(project: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    subprocess.run(["git", "-C", str(project), *args], check=True, capture_output=True, env=env)


def test_dirty_tree_is_refused_unless_allowed(hub, proj):
    (proj / ".gitignore").write_text("build/\n.kbuild/\n")
    _git(proj, "init", "-q")
    _git(proj, "add", "-A")
    _git(proj, "commit", "-q", "-m", "kernel")
    do_upload(hub, proj, dry_run=True)  # clean: fine
    untracked = proj / "torch-ext" / "img2gray" / "extra.py"  # an input git does not know
    untracked.write_text("SHIPPED = True\n")
    with pytest.raises(BuildError, match="input files git does not track"):
        do_upload(hub, proj, dry_run=True)
    untracked.unlink()

    src = proj / "csrc" / "img2gray_cpu.cpp"
    src.write_text(src.read_text() + "\n// local edit\n")
    with pytest.raises(BuildError, match="uncommitted changes") as err:
        do_upload(hub, proj, dry_run=True)
    assert "--allow-dirty" in str(err.value)
    result, _ = do_upload(hub, proj, dry_run=True, allow_dirty=True)
    assert result.status == "dry_run"
    _git(proj, "checkout", "--", "csrc")

    meta_path = variant_of(proj) / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["provenance"]["kernel"] = {"commit": "a" * 40, "dirty": True}
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(BuildError, match="built from a tree with uncommitted changes"):
        do_upload(hub, proj, dry_run=True)
    assert do_upload(hub, proj, allow_dirty=True)[0].status == "uploaded"


# ----------------------------------------------------------------------------- auth and errors


def test_wrong_or_missing_token_is_one_clean_line(hub, proj, tmp_path):
    wrong = "hf_wrong_token_value_9c2e"
    env = client_env(hub, tmp_path, token=wrong)
    result = kbuild_cli("upload", proj, env=env)
    assert result.returncode == 2
    output = result.stdout + result.stderr
    assert wrong not in output and TOKEN not in output and "Traceback" not in output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "HTTP 401" in errors[0] and "token" in errors[0]
    assert "hint: set HF_TOKEN" in result.stderr

    env = client_env(hub, tmp_path, token=None)
    result = kbuild_cli("upload", proj, env=env)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "error: no Hugging Face token" in result.stderr
    assert not [r for r in hub.requests if r[0] == "POST"]


def _http_error(status: int) -> HfHubHTTPError:
    response = httpx2.Response(status, request=httpx2.Request("POST", "http://hub.invalid/api/x"))
    return HfHubHTTPError(f"{status} error with hf_secret_in_message", response=response,
                          server_message="server says hf_secret_in_message")


@pytest.mark.parametrize("status, expected", [
    (401, "authentication failed (HTTP 401)"),
    (403, "permission denied (HTTP 403)"),
    (404, "not found (HTTP 404)"),
    (412, "the branch moved while uploading (HTTP 412)"),
    (500, "the Hub answered HTTP 500"),
])
def test_hub_errors_are_one_line_without_the_token(status, expected):
    err = hub_client.hub_error(_http_error(status), what="upload to org/k@v1", repo_id="org/k",
                            endpoint="http://hub.invalid", scrub=hub_client.Scrub("hf_secret_in_message"))
    text = str(err)
    assert expected in text.splitlines()[0] and "hf_secret_in_message" not in text
    assert hub_client.is_transient(_http_error(status)) == (status == 500)


def test_unreachable_hub(proj):
    with HubServer() as server:
        url = server.url  # a port that nobody listens on once stopped
    logs: list[str] = []
    with pytest.raises(BuildError, match=r"cannot reach http://127\.0\.0\.1:\d+ \(ConnectError\)"):
        publish.upload(proj, publish.UploadOptions(endpoint=url, token=TOKEN, load=False, retries=2,
                                                   backoff=0.01), log=logs.append, warn=logs.append)
    assert sum("retrying" in line for line in logs) == 2


# ----------------------------------------------------------------------------- faults


def test_transient_faults_are_retried_into_one_commit(hub, proj):
    hub.inject_faults(status=503, path_contains="/commit/v1", count=2)
    hub.inject_faults(drop=True, path_contains="/preupload/v1")
    hub.inject_faults(status=502, methods=("GET",), path_contains="/refs")
    hub.inject_faults(drop=True, methods=("GET",), path_contains="/tree/")
    result, logs = do_upload(hub, proj)
    assert result.status == "uploaded"
    assert len(hub.repo_commits(REPO, branch="v1")) == 2  # initial + one upload
    assert [s for m, p, s in hub.requests if "/commit/v1" in p] == [503, 503, 200]
    assert sum("retrying" in line for line in logs) >= 3  # ours; the client itself retries the tree GET and preupload
    assert v1_files(hub)[f"build/{variant_of(proj).name}/_ops.py"] == (variant_of(proj) / "_ops.py").read_bytes()


def test_persistent_failure_leaves_branch_unchanged_and_rerun_completes(hub, proj, api):
    do_upload(hub, proj)
    variant = variant_of(proj).name
    api.create_commit(REPO, repo_type="kernel", revision="v1", commit_message="stray",
                      operations=[CommitOperationAdd(f"build/{variant}/stale.txt", b"old")])
    before, files_before = hub.repo_commits(REPO, branch="v1"), v1_files(hub)
    hub.inject_faults(status=500, path_contains="/commit/v1", count=3)
    hub.inject_faults(drop=True, path_contains="/commit/v1", count=2)
    with pytest.raises(BuildError, match="upload to kernels-test/img2gray@v1: cannot reach"):
        do_upload(hub, proj)  # 5 attempts (4 retries), all failing
    assert hub.repo_commits(REPO, branch="v1") == before and v1_files(hub) == files_before

    result, _ = do_upload(hub, proj)
    assert result.status == "uploaded" and result.deleted == [f"build/{variant}/stale.txt"]
    assert hub.repo_commits(REPO, branch="v1")[1:] == before


def test_concurrent_push_gives_412_not_a_clobber(hub, proj, api, monkeypatch):
    do_upload(hub, proj)
    variant = variant_of(proj).name
    api.create_commit(REPO, repo_type="kernel", revision="v1", commit_message="stray",
                      operations=[CommitOperationAdd(f"build/{variant}/stale.txt", b"old")])
    real_tree = hub_client.HubClient.tree

    pushes = []

    def tree_then_someone_pushes(self, revision, paths):  # upload reads the tree twice: plan, commit
        listing = real_tree(self, revision, paths)
        pushes.append(b"theirs %d" % len(pushes))
        api.create_commit(REPO, repo_type="kernel", revision="v1", commit_message="concurrent",
                          operations=[CommitOperationAdd("notes.txt", pushes[-1])])
        return listing

    monkeypatch.setattr(hub_client.HubClient, "tree", tree_then_someone_pushes)
    with pytest.raises(BuildError, match="branch moved while uploading \\(HTTP 412\\); nothing was committed"):
        do_upload(hub, proj)
    head = hub.repo_commits(REPO, branch="v1")[0]
    assert v1_files(hub)["notes.txt"] == pushes[-1] and f"build/{variant}/stale.txt" in v1_files(hub)
    monkeypatch.setattr(hub_client.HubClient, "tree", real_tree)
    result, _ = do_upload(hub, proj)
    assert hub.repo_commits(REPO, branch="v1")[1] == head
    assert v1_files(hub)["notes.txt"] == pushes[-1] and result.deleted == [f"build/{variant}/stale.txt"]


def test_commit_that_landed_but_whose_answer_was_lost(hub, proj, monkeypatch):
    real_commit = HfApi.create_commit
    calls = []

    def commit_then_lose_the_answer(self, *args, **kw):
        info = real_commit(self, *args, **kw)
        calls.append(info.oid)
        if len(calls) == 1:
            raise httpx2.RemoteProtocolError("Server disconnected without sending a response.")
        return info

    monkeypatch.setattr(HfApi, "create_commit", commit_then_lose_the_answer)
    result, logs = do_upload(hub, proj)
    assert result.status == "uploaded" and result.commit == calls[0]
    assert len(result.added) == 4 and result.unchanged == []
    assert hub.repo_commits(REPO, branch="v1")[0] == calls[0]
    assert len(hub.repo_commits(REPO, branch="v1")) == 2  # the retry found nothing left to do
    assert any("RemoteProtocolError; retrying" in line for line in logs)


# ----------------------------------------------------------------------------- kernel-builder's flow

CI_TARBALL = Path(__file__).resolve().parents[3] / "shared" / "corpus" / \
    "kernels-community-40d4194f-ci.tar.gz"
COMMUNITY_CARD = """---
library_name: kernels
{% if license %}license: {{ license }}
{% endif %}---

This is the repository card of {{ repo_id }}.

## How to use
{% if functions %}

```python
kernel_module = get_kernel("{{ repo_id }}", version={{ version }})
{{ functions[0] }} = kernel_module.{{ functions[0] }}
```
{% endif %}

## Available functions
{% for func in functions %}
- `{{ func }}`
{% endfor %}
"""


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


def test_a_cards_template_is_rendered_and_a_broken_one_refused_before_anything(hub, proj, tmp_path):
    """kernels-community's cards are Jinja templates: upload sends them rendered (as
    kernel-builder's fill-card does); a template or front-matter error stops `upload --dry-run`,
    `upload` and `check` with one line naming CARD.md, before anything is read or written."""
    env = client_env(hub, tmp_path)
    summary = tmp_path / "upload.json"
    card = proj / "CARD.md"
    card.write_text(COMMUNITY_CARD.replace("{% if license %}license: {{ license }}\n{% endif %}",
                                           "license: [{{ license }}\n"))
    for args in (["upload", proj, "--dry-run", "--output-json", summary],
                 ["upload", proj, "--output-json", summary], ["check", proj]):
        refused = kbuild_cli(*args, env=env)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert error_lines(refused) == [
            f"error: {card}: front matter (line 3 of the rendered card) is not valid YAML: "
            "expected ',' or ']', but got '<stream end>'"], refused.stderr
        assert "Traceback" not in refused.stderr
    card.write_text(COMMUNITY_CARD.replace("{% endfor %}", ""))
    refused = kbuild_cli("upload", proj, "--dry-run", env=env)
    assert refused.returncode == 2 and error_lines(refused)[0].startswith(
        f"error: {card}:19: template error: Unexpected end of template")
    assert hub.requests == [] and not summary.exists()  # nothing read, nothing written

    card.write_text(COMMUNITY_CARD)
    done = kbuild_cli("upload", proj, "--output-json", summary, env=env)
    assert done.returncode == 0, done.stderr
    readme = hub.files(REPO)["README.md"].decode()
    assert readme.startswith("---\nlibrary_name: kernels\nlicense: apache-2.0\n---\n\n"
                             f"This is the repository card of {REPO}.\n")
    assert f'get_kernel("{REPO}", version=1)\nimg2gray = kernel_module.img2gray\n' in readme
    assert "{%" not in readme and "{{" not in readme
    read_back = RepoCard.load(hf_hub_download(REPO, "README.md", repo_type="kernel", endpoint=hub.url,
                                              token=TOKEN, cache_dir=tmp_path / "hf"))
    assert read_back.data.to_dict() == {"library_name": "kernels", "license": "apache-2.0"}
    assert json.loads(summary.read_text())["readme"]["source"] == "CARD.md"


def test_a_failure_between_the_two_commits_names_what_landed_and_a_rerun_completes(hub, proj, api):
    hub.inject_faults(status=500, path_contains="/commit/main", count=3)
    with pytest.raises(BuildError) as caught:
        do_upload(hub, proj, retries=2)  # 3 attempts, each refused
    v1_head = hub.repo_commits(REPO, branch="v1")[0]
    message = str(caught.value)
    assert message.startswith(f"upload to {REPO}@main: the Hub answered HTTP 500: Injected fault "
                              f"(500); already on "
                              f"{REPO}: the repo, created; branch v1, created; v1 at "
                              f"{v1_head[:12]} (4 added, 0 changed, 0 deleted)"), message
    assert "hint: run the same command again to finish: it uploads only what is missing" in message
    assert "README.md" not in hub.files(REPO)

    result, logs = do_upload(hub, proj)
    assert result.status == "uploaded" and result.commit is None  # v1 had it all already
    assert result.readme["state"] == "added" and result.readme["commit"]
    assert hub.repo_commits(REPO, branch="v1")[0] == v1_head and "README.md" in hub.files(REPO)
    assert f"{REPO}@v1 is up to date (4 files); no commit" in logs


def test_upstreams_interface_repo_type_quiet_json_lines_and_branches(hub, proj, tmp_path):
    env = client_env(hub, tmp_path)
    summary = tmp_path / "upload.json"
    refusals = {
        ("--repo-type", "model"): "error: key `--repo-type`: --repo-type 'model': kbuild uploads "
                                  "to kernel repos only",
        ("--branch", ""): "error: key `--branch`: --branch '' is not a branch name: it is empty",
    }
    for args, line in refusals.items():
        refused = kbuild_cli("upload", proj, *args, "--output-json", summary, env=env)
        assert refused.returncode == 2 and len(error_lines(refused)) == 1, refused.stderr
        assert error_lines(refused)[0].startswith(line), refused.stderr
    for branch, message in (("refs/pr/1", "it is under refs/, which the Hub reserves"),
                            ("HEAD", "it is HEAD"), ("a/.b", "it has a part '.b' that starts"),
                            ("v7", "where `kernels` finds version 7, and the variants are "
                                   "version 1")):
        with pytest.raises(BuildError, match=re.escape(message)):
            do_upload(hub, proj, branch=branch, output_json=summary)
    assert hub.requests == [] and not summary.exists()  # refused before the Hub, no JSON

    first = kbuild_cli("upload", proj, "--repo-type", "kernel", "-q", "--output-json", summary,
                       env=env)
    assert first.returncode == 0, first.stderr
    url = f"{hub.url}/kernels/{REPO}/tree/v1"
    assert first.stdout == f"Kernel uploaded: {url}\n"
    assert [line for line in first.stderr.splitlines() if not line.startswith("warning:")] == []
    data = json.loads(summary.read_text())
    assert {k: data[k] for k in ("status", "repo_id", "branch", "url", "pull_requests")} == {
        "status": "uploaded", "repo_id": REPO, "branch": "v1", "url": url, "pull_requests": []}

    again = kbuild_cli("upload", proj, "--quiet", "--output-json", summary, env=env)
    assert again.returncode == 0 and again.stdout == "" and "No changes to upload.\n" in again.stderr
    data = json.loads(summary.read_text())
    assert data["status"] == "no_changes" and data["url"] is None and data["pull_requests"] == []

    (proj / "CARD.md").write_text("---\nlicense: apache-2.0\n---\n# img2gray, by hand\n")
    prs = tmp_path / "upload-pr.json"
    pr = kbuild_cli("upload", proj, "--create-pr", "--output-json", prs, env=env)
    assert pr.returncode == 0, pr.stderr
    data = json.loads(prs.read_text())
    pr_url = f"{hub.url}/kernels/{REPO}/discussions/1"
    assert data["status"] == "pull_request_created" and data["url"] is None
    assert data["pull_requests"] == [{"branch": "main", "url": pr_url}]  # only README changed
    assert pr.stdout.splitlines()[-1] == f"Pull request created: {pr_url}"
    assert "%|" not in first.stderr + again.stderr + pr.stderr  # no progress bars

    if not CI_TARBALL.is_file():
        pytest.skip(f"no kernels-community CI scripts at {CI_TARBALL} (test input kept beside "
                    "the checkout, not in it): their bot's reading of the JSON is not tried")
    ci = tmp_path / "ci"
    with tarfile.open(CI_TARBALL) as tar:
        tar.extractall(ci, filter="data")
    bot = subprocess.run([sys.executable, str(ci / ".github" / "scripts" /
                                              "format_hub_upload_comment.py"),
                          "img2gray", "kernels-community", str(summary), str(prs)],
                         cwd=ci, capture_output=True, text=True, timeout=60)
    assert bot.returncode == 0, bot.stderr
    assert bot.stdout.splitlines() == [
        "Hub uploads:", "- Hub repo: https://huggingface.co/kernels/kernels-community/img2gray",
        f"- Hub pull request: {pr_url}"]


def test_a_new_version_branch_does_not_carry_mains_variants(hub, builds, tmp_path, api):
    """kernels-community uploads a version-1 kernel to v1 and to main; v2, cut from main, must
    hold only version 2's files (the loader would otherwise find version 1's variants there)."""
    v1 = fresh_copy(builds(), tmp_path / "v1")
    do_upload(hub, v1, branch="main")
    stray = "build/torch212-cxx11-cpu-x86_64-linux/metadata.json"
    api.create_commit(REPO, repo_type="kernel", revision="main", commit_message="older variant",
                      operations=[CommitOperationAdd(stray, b"{}")])
    v2 = fresh_copy(builds("v2", version=2, marker="two"), tmp_path / "v2")
    planned, logs = do_upload(hub, v2, dry_run=True)
    assert stray in planned.deleted and any(f"delete  {stray}" in line for line in logs)
    result, _ = do_upload(hub, v2)
    files = hub.files(REPO, revision="v2")
    assert stray not in files and stray in result.deleted
    assert sorted(p for p in files if p.startswith("build/")) == sorted(
        f"build/{variant_of(v2).name}/{p.name}" for p in variant_of(v2).iterdir())
    assert stray in hub.files(REPO, revision="main")  # main itself is left alone


def test_quiet_turns_the_clients_progress_bars_off_for_the_upload_only(hub, proj, monkeypatch):
    from huggingface_hub.utils import are_progress_bars_disabled
    seen = []
    real_commit = HfApi.create_commit

    def commit(self, *args, **kw):
        seen.append(are_progress_bars_disabled())
        return real_commit(self, *args, **kw)

    monkeypatch.setattr(HfApi, "create_commit", commit)
    assert not are_progress_bars_disabled()
    do_upload(hub, proj, quiet=True)
    assert seen == [True, True] and not are_progress_bars_disabled()  # v1, then README.md
    (proj / "CARD.md").write_text("# changed\n")
    do_upload(hub, proj)
    assert seen[2:] == [False]
