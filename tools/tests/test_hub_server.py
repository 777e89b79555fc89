"""Tests of kbuild_hub with the real huggingface_hub client. The real `kernels` clients (its CLI:
versions, info, lock, download; get_kernel trusted and untrusted, offline loads) run against it
in test_publish.py, on kernels `kbuild upload` published."""

from __future__ import annotations

import hashlib
import http.client
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from kbuild_hub.server import HubServer, git_blob_oid

httpx2 = pytest.importorskip("httpx2", reason="huggingface_hub's HTTP client (hub ≥ 1.x)")

TOKEN = "hf_test_token"
KERNEL = "org/tiny"
METADATA = {
    "name": "tiny",
    "id": "_tiny_cpu_abc1234",
    "version": 1,
    "license": "apache-2.0",
    "python-depends": [],
    "kernel-depends": [],
    "backend": {"type": "cpu"},
}


@pytest.fixture
def hub():
    with HubServer() as server:
        yield server


@pytest.fixture
def api(hub):
    return HfApi(endpoint=hub.url, token=TOKEN)


def make_kernel_folder(root: Path, extra_files: int = 0) -> Path:
    """A pure-Python noarch `torch-cpu` variant, plus `extra_files` small data files."""
    variant = root / "build" / "torch-cpu"
    variant.mkdir(parents=True)
    (variant / "__init__.py").write_text("from ._ops import ops\n\n\ndef hello():\n    return 'tiny says hi'\n")
    (variant / "_ops.py").write_text(
        "ops = None\n\n\ndef add_op_namespace_prefix(name):\n    return '_tiny_cpu_abc1234::' + name\n"
    )
    (variant / "metadata.json").write_text(json.dumps(METADATA))
    for i in range(extra_files):
        (variant / "data" / f"{i:02d}.txt").parent.mkdir(exist_ok=True)
        (variant / "data" / f"{i:02d}.txt").write_text(f"file {i}\n" * (i + 1))
    return root


def publish(api: HfApi, folder: Path, repo_id: str = KERNEL, version: int = 1) -> str:
    api.create_repo(repo_id, repo_type="kernel", exist_ok=True)
    api.create_branch(repo_id, branch=f"v{version}", repo_type="kernel", exist_ok=True)
    info = api.upload_folder(
        folder_path=folder, repo_id=repo_id, repo_type="kernel", revision=f"v{version}", commit_message="Upload"
    )
    return info.oid


def local_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def raw_request(hub: HubServer, method: str, path: str, conn: http.client.HTTPConnection | None = None, **kw):
    conn = conn or http.client.HTTPConnection(hub.url.split("://")[1], timeout=10)
    conn.request(method, path, **kw)
    resp = conn.getresponse()
    return resp, resp.read()


# ----------------------------------------------------------------------------- repos, uploads, downloads


def test_create_upload_list_download(hub, api, tmp_path):
    folder = make_kernel_folder(tmp_path / "src", extra_files=20)
    url = api.create_repo(KERNEL, repo_type="kernel")
    assert (url.repo_id, url.repo_type) == (KERNEL, "kernel")
    assert api.create_repo(KERNEL, repo_type="kernel", exist_ok=True) == url  # 409 carries the url
    with pytest.raises(HfHubHTTPError) as err:
        api.create_repo(KERNEL, repo_type="kernel")
    assert err.value.response.status_code == 409

    # Uploading to a branch that does not exist yet fails.
    with pytest.raises(RevisionNotFoundError):
        api.upload_folder(folder_path=folder, repo_id=KERNEL, repo_type="kernel", revision="v1", commit_message="x")
    oid = publish(api, folder)

    refs = api.list_repo_refs(KERNEL, repo_type="kernel")
    assert {b.name: b.target_commit for b in refs.branches}["v1"] == oid
    assert refs.branches[0].name == "main" and refs.tags == []
    assert hub.repo_commits(KERNEL, branch="v1")[0] == oid
    assert len(hub.repo_commits(KERNEL, branch="v1")) == 2  # initial commit + upload
    assert len(hub.repo_commits(KERNEL)) == 1  # main did not move

    expected = local_files(folder)
    assert {k: v for k, v in hub.files(KERNEL, revision="v1").items() if k.startswith("build/")} == {
        f"{k}": v for k, v in expected.items()
    }

    # Tree listings: repo-absolute paths, git blob oids, intermediate directories.
    top = list(api.list_repo_tree(KERNEL, path_in_repo="build", repo_type="kernel", revision="refs/heads/v1"))
    assert [(e.path, type(e).__name__) for e in top] == [("build/torch-cpu", "RepoFolder")]
    tree = {e.path: e for e in api.list_repo_tree(KERNEL, repo_type="kernel", revision="v1", recursive=True)}
    assert "build/torch-cpu/data" in tree and type(tree["build/torch-cpu/data"]).__name__ == "RepoFolder"
    for path, data in expected.items():
        assert tree[path].blob_id == git_blob_oid(data) == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        assert tree[path].size == len(data)
    with pytest.raises(EntryNotFoundError):
        list(api.list_repo_tree(KERNEL, path_in_repo="nope", repo_type="kernel", revision="v1"))

    # Commits, repo info, file_exists.
    commits = api.list_repo_commits(KERNEL, repo_type="kernel", revision="v1")
    assert [c.commit_id for c in commits] == hub.repo_commits(KERNEL, branch="v1")
    assert commits[0].title == "Upload" and commits[-1].title == "initial commit"
    info = api.repo_info(KERNEL, repo_type="kernel", revision="v1")
    assert info.sha == oid and info.id == KERNEL
    assert api.file_exists(KERNEL, "build/torch-cpu/_ops.py", repo_type="kernel", revision="v1")
    assert not api.file_exists(KERNEL, "build/torch-cpu/_ops.py", repo_type="kernel")  # not on main
    assert not api.file_exists(KERNEL, "x.py", repo_type="kernel", revision="nope")
    with pytest.raises(RevisionNotFoundError):
        api.repo_info(KERNEL, repo_type="kernel", revision="v9")
    with pytest.raises(RepositoryNotFoundError):
        api.repo_info("org/missing", repo_type="kernel")

    # Downloads into a temporary cache.
    cache = tmp_path / "cache"
    path = hf_hub_download(
        KERNEL, "build/torch-cpu/_ops.py", repo_type="kernel", revision="v1",
        endpoint=hub.url, token=TOKEN, cache_dir=cache,
    )
    assert Path(path).read_bytes() == expected["build/torch-cpu/_ops.py"]
    assert f"snapshots/{oid}/" in Path(path).as_posix()
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(KERNEL, "missing.txt", repo_type="kernel", revision="v1",
                        endpoint=hub.url, token=TOKEN, cache_dir=cache)
    snap = Path(snapshot_download(KERNEL, repo_type="kernel", revision="v1",
                                  endpoint=hub.url, token=TOKEN, cache_dir=tmp_path / "snap"))
    assert local_files(snap) == {**expected, ".gitattributes": hub.files(KERNEL)[".gitattributes"]}

    # A second identical upload is a no-op; a changed file makes exactly one commit.
    publish(api, folder)
    assert len(hub.repo_commits(KERNEL, branch="v1")) == 2
    (folder / "build/torch-cpu/_ops.py").write_text("ops = 2\n")
    new_oid = publish(api, folder)
    assert hub.repo_commits(KERNEL, branch="v1")[:2] == [new_oid, oid]
    assert hub.files(KERNEL, revision=oid)["build/torch-cpu/_ops.py"] == expected["build/torch-cpu/_ops.py"]
    assert not [r for r in hub.unknown_routes]


def test_kernel_repo_info_has_no_siblings_but_models_do(hub, api):
    api.create_repo(KERNEL, repo_type="kernel")
    api.create_repo("org/model")
    _, kernel_body = raw_request(hub, "GET", f"/api/kernels/{KERNEL}")
    _, model_body = raw_request(hub, "GET", "/api/models/org/model?blobs=true")
    assert "siblings" not in json.loads(kernel_body)
    siblings = json.loads(model_body)["siblings"]
    assert siblings == [{"rfilename": ".gitattributes", "size": len(hub.files("org/model", "model")[".gitattributes"]),
                         "blobId": git_blob_oid(hub.files("org/model", "model")[".gitattributes"])}]
    assert [s.rfilename for s in api.model_info("org/model").siblings] == [".gitattributes"]


def test_commit_operations_deletes_and_atomic_failure(hub, api):
    api.create_repo(KERNEL, repo_type="kernel")
    api.create_commit(
        KERNEL, repo_type="kernel", commit_message="add",
        operations=[CommitOperationAdd(p, p.encode()) for p in ("a/1.txt", "a/2.txt", "b/3.txt", "c.txt")],
    )
    api.create_commit(
        KERNEL, repo_type="kernel", commit_message="delete",
        operations=[CommitOperationDelete("a/", is_folder=True), CommitOperationDelete("c.txt")],
    )
    assert sorted(hub.files(KERNEL)) == [".gitattributes", "b/3.txt"]

    before = hub.repo_commits(KERNEL)
    with pytest.raises(EntryNotFoundError):  # the add in the same commit must not land either
        api.create_commit(
            KERNEL, repo_type="kernel", commit_message="bad",
            operations=[CommitOperationAdd("new.txt", b"n"), CommitOperationDelete("missing.txt")],
        )
    assert hub.repo_commits(KERNEL) == before and "new.txt" not in hub.files(KERNEL)


def test_gitignore_is_enforced_on_upload(hub, api, tmp_path):
    folder = tmp_path / "src"
    (folder / "logs").mkdir(parents=True)
    (folder / ".gitignore").write_text("*.log\nlogs/\n!keep.log\n")
    for name in ("a.txt", "b.log", "keep.log", "logs/c.txt"):
        (folder / name).write_text(name)
    api.create_repo(KERNEL, repo_type="kernel")
    api.upload_folder(folder_path=folder, repo_id=KERNEL, repo_type="kernel", commit_message="up")
    assert sorted(hub.files(KERNEL)) == [".gitattributes", ".gitignore", "a.txt", "keep.log"]


def test_concurrent_commits_to_one_branch(hub, api):
    api.create_repo(KERNEL, repo_type="kernel")

    def commit(i: int) -> str:
        return api.create_commit(KERNEL, repo_type="kernel", commit_message=f"c{i}",
                                 operations=[CommitOperationAdd(f"f{i}.txt", str(i).encode())]).oid

    with ThreadPoolExecutor(8) as pool:
        oids = list(pool.map(commit, range(16)))
    history = hub.repo_commits(KERNEL)
    assert len(history) == 17 and set(oids) <= set(history)  # a linear history, nothing lost
    assert {f"f{i}.txt" for i in range(16)} <= set(hub.files(KERNEL))


# ----------------------------------------------------------------------------- refs and pull requests


def test_tags_and_branches(hub, api, tmp_path):
    oid = publish(api, make_kernel_folder(tmp_path / "src"))
    api.create_tag(KERNEL, tag="v1.0.0", revision="v1", repo_type="kernel", tag_message="first")
    with pytest.raises(HfHubHTTPError) as err:
        api.create_tag(KERNEL, tag="v1.0.0", revision="v1", repo_type="kernel")
    assert err.value.response.status_code == 409
    with pytest.raises(RevisionNotFoundError):
        api.create_tag(KERNEL, tag="t2", revision="nope", repo_type="kernel")

    refs = api.list_repo_refs(KERNEL, repo_type="kernel")
    assert [(t.name, t.ref, t.target_commit) for t in refs.tags] == [("v1.0.0", "refs/tags/v1.0.0", oid)]
    assert hub.files(KERNEL, revision="v1.0.0") == hub.files(KERNEL, revision="v1")

    # A branch from a tag; a branch from an abbreviated commit id.
    api.create_branch(KERNEL, branch="feature/x", revision="v1.0.0", repo_type="kernel")
    api.create_branch(KERNEL, branch="short", revision=oid[:8], repo_type="kernel")
    with pytest.raises(HfHubHTTPError) as err:
        api.create_branch(KERNEL, branch="short", repo_type="kernel")
    assert err.value.response.status_code == 409
    branches = {b.name: b.target_commit for b in api.list_repo_refs(KERNEL, repo_type="kernel").branches}
    assert branches["feature/x"] == branches["short"] == oid

    api.delete_branch(KERNEL, branch="v1", repo_type="kernel")
    api.delete_branch(KERNEL, branch="feature/x", repo_type="kernel")
    api.delete_tag(KERNEL, tag="v1.0.0", repo_type="kernel")
    refs = api.list_repo_refs(KERNEL, repo_type="kernel")
    assert [b.name for b in refs.branches] == ["main", "short"] and refs.tags == []
    with pytest.raises(HfHubHTTPError) as err:
        api.delete_branch(KERNEL, branch="v1", repo_type="kernel")
    assert err.value.response.status_code == 404
    with pytest.raises(HfHubHTTPError) as err:
        api.delete_branch(KERNEL, branch="main", repo_type="kernel")
    assert err.value.response.status_code == 403


def test_pull_requests(hub, api, tmp_path):
    api.create_repo(KERNEL, repo_type="kernel")
    main_before = hub.repo_commits(KERNEL)
    info = api.create_commit(
        KERNEL, repo_type="kernel", commit_message="Add card", create_pr=True,
        operations=[CommitOperationAdd("README.md", b"---\nlicense: apache-2.0\n---\n# tiny\n")],
    )
    assert info.pr_revision == "refs/pr/1" and info.pr_num == 1
    assert info.pr_url == f"{hub.url}/kernels/{KERNEL}/discussions/1"
    assert hub.repo_commits(KERNEL) == main_before  # the branch did not move
    refs = api.list_repo_refs(KERNEL, repo_type="kernel", include_pull_requests=True)
    assert [(p.ref, p.target_commit) for p in refs.pull_requests] == [("refs/pr/1", info.oid)]
    assert "README.md" in hub.files(KERNEL, revision="refs/pr/1")

    # More commits to the PR ref, then a second PR.
    api.create_commit(KERNEL, repo_type="kernel", revision="refs/pr/1", commit_message="more",
                      operations=[CommitOperationAdd("extra.txt", b"x")])
    assert hub.repo_commits(KERNEL, branch="refs/pr/1")[1] == info.oid
    second = api.create_commit(KERNEL, repo_type="kernel", commit_message="again", create_pr=True,
                               operations=[CommitOperationAdd("other.txt", b"o")])
    assert second.pr_num == 2
    assert hf_hub_download(KERNEL, "extra.txt", repo_type="kernel", revision="refs/pr/1", endpoint=hub.url,
                           token=TOKEN, cache_dir=tmp_path / "c")

    # Client quirk: upload_folder(create_pr=True) opens the PR through the discussions API,
    # which huggingface_hub refuses for kernel repos before sending anything.
    folder = make_kernel_folder(tmp_path / "src")
    with pytest.raises(ValueError, match="Invalid repo type"):
        api.upload_folder(folder_path=folder, repo_id=KERNEL, repo_type="kernel", commit_message="pr",
                          create_pr=True)

    # For models it works, and the PR can be merged.
    api.create_repo("org/model")
    pr = api.upload_folder(folder_path=folder, repo_id="org/model", commit_message="pr", create_pr=True)
    assert pr.pr_revision == "refs/pr/1"
    details = api.get_discussion_details("org/model", 1)
    assert details.is_pull_request and details.status == "open" and "build/torch-cpu/_ops.py" in details.diff
    api.merge_pull_request("org/model", 1)
    assert "build/torch-cpu/_ops.py" in hub.files("org/model", "model")
    assert api.get_discussion_details("org/model", 1).status == "merged"


def test_stale_parent_commit_is_412(hub, api):
    api.create_repo(KERNEL, repo_type="kernel")
    first = hub.repo_commits(KERNEL)[0]
    second = api.create_commit(KERNEL, repo_type="kernel", commit_message="one", parent_commit=first,
                               operations=[CommitOperationAdd("one.txt", b"1")]).oid
    with pytest.raises(HfHubHTTPError) as err:
        api.create_commit(KERNEL, repo_type="kernel", commit_message="stale", parent_commit=first,
                          operations=[CommitOperationAdd("two.txt", b"2")])
    assert err.value.response.status_code == 412
    assert hub.repo_commits(KERNEL) == [second, first]
    # An abbreviated parent that matches the head is accepted.
    api.create_commit(KERNEL, repo_type="kernel", commit_message="fresh", parent_commit=second[:7],
                      operations=[CommitOperationAdd("two.txt", b"2")])
    assert len(hub.repo_commits(KERNEL)) == 3


# ----------------------------------------------------------------------------- auth


def test_token_required_for_writes_and_private_reads(tmp_path):
    with HubServer(token=TOKEN) as hub:
        good = HfApi(endpoint=hub.url, token=TOKEN)
        wrong = HfApi(endpoint=hub.url, token="hf_wrong")
        anonymous = HfApi(endpoint=hub.url, token=False)

        for client in (wrong, anonymous):
            with pytest.raises(HfHubHTTPError) as err:
                client.create_repo(KERNEL, repo_type="kernel")
            assert err.value.response.status_code == 401
        with pytest.raises(HfHubHTTPError) as err:
            wrong.whoami()
        assert err.value.response.status_code == 401
        assert good.whoami()["name"] == hub.user

        good.create_repo(KERNEL, repo_type="kernel")
        good.create_repo("org/secret", repo_type="kernel", private=True)
        assert anonymous.repo_info(KERNEL, repo_type="kernel").sha  # public reads need no token
        with pytest.raises(RepositoryNotFoundError):
            anonymous.repo_info("org/secret", repo_type="kernel")
        assert good.repo_info("org/secret", repo_type="kernel").private is True

        before = hub.repo_commits(KERNEL)
        with pytest.raises(HfHubHTTPError) as err:
            wrong.create_commit(KERNEL, repo_type="kernel", commit_message="x",
                                operations=[CommitOperationAdd("x.txt", b"x")])
        assert err.value.response.status_code == 401
        assert hub.repo_commits(KERNEL) == before

        hub.token = None  # the switch applies at once
        anonymous.create_branch(KERNEL, branch="v1", repo_type="kernel")


# ----------------------------------------------------------------------------- faults


def test_injected_500_fails_commit_and_changes_nothing(hub, api):
    api.create_repo(KERNEL, repo_type="kernel")
    before = hub.repo_commits(KERNEL)
    hub.inject_faults(status=500, path_contains="/commit/")
    with pytest.raises(HfHubHTTPError) as err:
        api.create_commit(KERNEL, repo_type="kernel", commit_message="x",
                          operations=[CommitOperationAdd("x.txt", b"x")])
    assert err.value.response.status_code == 500
    assert hub.repo_commits(KERNEL) == before and "x.txt" not in hub.files(KERNEL)
    assert ("POST", f"/api/kernels/{KERNEL}/commit/main", 500) in hub.requests
    # The fault was used up: the same commit now succeeds.
    api.create_commit(KERNEL, repo_type="kernel", commit_message="x", operations=[CommitOperationAdd("x.txt", b"x")])
    assert len(hub.repo_commits(KERNEL)) == 2


def test_dropped_connection(hub, api):
    api.create_repo(KERNEL, repo_type="kernel")
    before = hub.repo_commits(KERNEL)
    hub.inject_faults(drop=True, path_contains="/commit/")
    with pytest.raises(httpx2.RemoteProtocolError):
        api.create_commit(KERNEL, repo_type="kernel", commit_message="x",
                          operations=[CommitOperationAdd("x.txt", b"x")])
    assert hub.repo_commits(KERNEL) == before
    assert ("POST", f"/api/kernels/{KERNEL}/commit/main", 0) in hub.requests
    # The client's pooled connection recovers.
    assert api.list_repo_refs(KERNEL, repo_type="kernel").branches[0].target_commit == before[0]


def test_upload_folder_retries_transient_commit_failures(hub, api, tmp_path):
    folder = make_kernel_folder(tmp_path / "src")
    api.create_repo(KERNEL, repo_type="kernel")
    api.create_branch(KERNEL, branch="v1", repo_type="kernel")
    hub.inject_faults(status=503, path_contains="/commit/")
    hub.inject_faults(drop=True, path_contains="/commit/")
    api.upload_folder(folder_path=folder, repo_id=KERNEL, repo_type="kernel", revision="v1", commit_message="up")
    commit_statuses = [s for m, p, s in hub.requests if "/commit/" in p]
    assert commit_statuses == [503, 0, 200]
    assert len(hub.repo_commits(KERNEL, branch="v1")) == 2  # exactly one new commit


# ----------------------------------------------------------------------------- HTTP details


def test_http_semantics(hub, api):
    api.create_repo(KERNEL, repo_type="kernel")
    api.create_commit(KERNEL, repo_type="kernel", commit_message="x",
                      operations=[CommitOperationAdd("dir/data.bin", bytes(range(256)))])
    conn = http.client.HTTPConnection(hub.url.split("://")[1], timeout=10)  # one keep-alive connection
    path = f"/kernels/{KERNEL}/resolve/main/dir%2Fdata.bin"

    head, head_body = raw_request(hub, "HEAD", path, conn)
    get, body = raw_request(hub, "GET", path, conn)
    assert head.status == get.status == 200 and head_body == b"" and body == bytes(range(256))
    assert head.getheader("Content-Length") == get.getheader("Content-Length") == "256"
    assert head.getheader("ETag") == f'"{git_blob_oid(body)}"'
    assert head.getheader("X-Repo-Commit") == hub.repo_commits(KERNEL)[0]
    assert head.getheader("X-Xet-Hash") is None

    part, part_body = raw_request(hub, "GET", path, conn, headers={"Range": "bytes=10-"})
    assert part.status == 206 and part_body == bytes(range(10, 256))
    assert part.getheader("Content-Range") == "bytes 10-255/256"

    missing, missing_body = raw_request(hub, "HEAD", f"/kernels/{KERNEL}/resolve/main/none", conn)
    assert missing.status == 404 and missing_body == b"" and int(missing.getheader("Content-Length")) > 0
    assert missing.getheader("X-Error-Code") == "EntryNotFound"
    assert missing.getheader("X-Repo-Commit") == hub.repo_commits(KERNEL)[0]
    norev, _ = raw_request(hub, "GET", f"/kernels/{KERNEL}/resolve/nope/dir%2Fdata.bin", conn)
    assert norev.getheader("X-Error-Code") == "RevisionNotFound"

    unknown, unknown_body = raw_request(hub, "GET", "/api/does-not-exist", conn)
    assert unknown.status == 404 and "error" in json.loads(unknown_body)
    assert ("GET", "/api/does-not-exist") in hub.unknown_routes

    # A chunked request body is read whole; malformed framing is a 400.
    chunks = [b'{"content": "---\\nlicense: mit\\n---\\n",', b' "repoType": "kernel"}']
    conn.request("POST", "/api/validate-yaml", body=iter(chunks), encode_chunked=True,
                 headers={"Content-Type": "application/json"})
    chunked = conn.getresponse()
    assert chunked.status == 200 and json.loads(chunked.read()) == {"errors": [], "warnings": []}
    bad, _ = raw_request(hub, "POST", "/api/validate-yaml", headers={"Content-Length": "x"})
    assert bad.status == 400

    # Still the same connection after errors; the org overview follows the switch.
    _, overview = raw_request(hub, "GET", "/api/organizations/org/overview", conn)
    assert json.loads(overview)["trustedKernelPublisher"] is True
    hub.trusted_publisher = False
    _, overview = raw_request(hub, "GET", "/api/organizations/org/overview", conn)
    assert json.loads(overview)["trustedKernelPublisher"] is False
    conn.close()


def test_persistence(tmp_path):
    data_dir = tmp_path / "store"
    with HubServer(data_dir=data_dir) as hub:
        oid = publish(HfApi(endpoint=hub.url, token=TOKEN), make_kernel_folder(tmp_path / "src"))
        files = hub.files(KERNEL, revision="v1")
    with HubServer(data_dir=data_dir) as hub:
        assert hub.repo_commits(KERNEL, branch="v1")[0] == oid
        assert hub.files(KERNEL, revision="v1") == files
        api = HfApi(endpoint=hub.url, token=TOKEN)
        assert {b.name for b in api.list_repo_refs(KERNEL, repo_type="kernel").branches} == {"main", "v1"}
