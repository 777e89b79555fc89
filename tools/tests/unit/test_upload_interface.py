"""upload's interface as kernel-builder's: the branch names git and the Hub accept (refused
early, one line), a `v<N>` branch agreeing with the variants' version, the JSON summary's fields
and values, its URLs and the printed result lines."""

from __future__ import annotations

import json

import pytest

from kbuild.core.errors import BuildError
from kbuild.publish import outcome
from kbuild.publish.refs import check_branch, check_branch_version


@pytest.mark.parametrize("branch", ["main", "v1", "v12", "release/2026.1", "feature_x-2", "a.b"])
def test_branch_names_git_and_the_hub_take(branch):
    assert check_branch(branch) == branch


@pytest.mark.parametrize("branch, why", [
    ("", "is empty (leave --branch out for the default"),
    ("refs/pr/1", "is under refs/, which the Hub reserves"),
    ("refs/heads/v1", "is under refs/"),
    ("HEAD", "is HEAD, which git reserves"),
    ("a/.b", "has a part '.b' that starts with `.`"),
    (".hidden", "has a part '.hidden' that starts with `.`"),
    ("v1.lock", "has a part 'v1.lock' that ends with `.lock`"),
    ("../v1", "has `..`"),
    ("a..b", "has `..`"),
    ("v1.", "ends with `.`"),
    ("-v1", "starts with `-`"),
    ("a//b", "has an empty part"),
    ("v1/", "has an empty part"),
    ("a b", "has characters a branch name cannot have (' ')"),
    ("v1~2", "has characters"),
    ("x" * 201, "is longer than 200 characters"),
])
def test_branch_names_refused_with_the_reason(branch, why):
    with pytest.raises(BuildError) as caught:
        check_branch(branch)
    text = str(caught.value)
    assert text.startswith(f"key `--branch`: --branch {branch!r} is not a branch name: it {why}")
    assert len(text.splitlines()) == 2 and "hint: letters, digits" in text


def test_a_version_branch_must_be_the_variants_version():
    check_branch_version("v3", 3)
    check_branch_version("main", 3)
    check_branch_version("v3-staging", 1)  # not where `kernels` looks for a version
    with pytest.raises(BuildError, match="--branch v7 is where `kernels` finds version 7, and "
                                         "the variants are version 1"):
        check_branch_version("v7", 1)


def test_urls_as_upstream_writes_them():
    assert outcome.kernel_url("https://huggingface.co", "org/k", "v1") == \
        "https://hf.co/kernels/org/k/tree/v1"
    assert outcome.kernel_url("https://huggingface.co/", "org/k", None) == "https://hf.co/kernels/org/k"
    assert outcome.kernel_url("http://127.0.0.1:8080", "org/k", "main") == \
        "http://127.0.0.1:8080/kernels/org/k/tree/main"  # another Hub: its own address


def test_the_summary_has_upstreams_fields_first_and_values(tmp_path):
    result = outcome.UploadResult(status=outcome.PR_CREATED, repo_id="org/k", branch="v1", url=None,
                                  pull_requests=[outcome.PullRequest("v1", "u1"),
                                                 outcome.PullRequest("main", "u2")])
    path = tmp_path / "deep" / "upload.json"
    outcome.write_json(path, result)
    data = json.loads(path.read_text())
    assert list(data)[:5] == ["status", "repo_id", "branch", "url", "pull_requests"]
    assert data["status"] == "pull_request_created" and data["url"] is None
    assert data["pull_requests"] == [{"branch": "v1", "url": "u1"}, {"branch": "main", "url": "u2"}]
    assert sorted(p.name for p in path.parent.iterdir()) == ["upload.json"]
    assert {outcome.NO_CHANGES, outcome.UPLOADED, outcome.PR_CREATED} == {
        "no_changes", "uploaded", "pull_request_created"}


@pytest.mark.parametrize("status, url, prs, out, err", [
    ("uploaded", "https://hf.co/kernels/org/k/tree/v1", [], ["Kernel uploaded: "
                                                            "https://hf.co/kernels/org/k/tree/v1"], []),
    ("pull_request_created", None, ["p1", "p2"], ["Pull request created: p1",
                                                  "Pull request created: p2"], []),
    ("no_changes", None, [], [], ["No changes to upload."]),
])
def test_the_result_lines(status, url, prs, out, err):
    said, noted = [], []
    result = outcome.UploadResult(status=status, repo_id="org/k", branch="v1", url=url,
                                  pull_requests=[outcome.PullRequest("v1", u) for u in prs])
    outcome.announce(result, say=said.append, note=noted.append)
    assert (said, noted) == (out, err)
