"""The Hub repo and branch a command names are checked in one place (publish/refs.py): upload,
api-diff, and the downloads of verify and to-wheel --repo-id refuse a repo id that is not
org/name, and a branch git or the Hub would refuse, before anything is read from the Hub."""

from __future__ import annotations

import pytest

from kbuild.core import manifest
from kbuild.core.errors import BuildError
from kbuild.publish import refs
from kbuild.publish.api import api_diff
from kbuild.publish.wheel import download_build
from kbuild_testing import REPO, copy_project


@pytest.fixture
def project(tmp_path):
    return copy_project(tmp_path / "p", REPO)


def hub_table(project, text: str) -> manifest.General:
    path = project / "build.toml"
    path.write_text(path.read_text().replace('[general.hub]\n', f'[general.hub]\n{text}'))
    return manifest.load(project).general


def test_repo_and_branch_from_the_options_or_build_toml(project):
    general = manifest.load(project).general
    assert refs.hub_repo(project, general, None, purpose="upload to") == "kernels-test/img2gray"
    assert refs.hub_repo(project, general, "org/other", purpose="upload to") == "org/other"
    assert refs.hub_branch(general, None) == "v1" and refs.hub_branch(general, "main") == "main"
    assert refs.hub_branch(hub_table(project, 'branch = "main"\n'), None) == "main"


def test_a_version_branch_of_another_version_names_where_it_came_from(project):
    general = hub_table(project, 'branch = "v2"\n')
    with pytest.raises(BuildError, match="where `kernels` finds version 2") as e:
        refs.hub_branch(general, None)
    assert e.value.key == "general.hub.branch"
    with pytest.raises(BuildError) as e:
        refs.hub_branch(general, "v3")
    assert e.value.key == "--branch"


@pytest.mark.parametrize("repo_id", ["no-slash", "a/b/c", "a b/c"])
def test_api_diff_and_downloads_refuse_a_repo_id_before_the_hub(project, repo_id):
    with pytest.raises(BuildError, match="is not of the form org/name"):
        api_diff(project, repo_id=repo_id, endpoint="http://127.0.0.1:9")
    with pytest.raises(BuildError, match="is not of the form org/name"):
        download_build(repo_id, 1, endpoint="http://127.0.0.1:9")


def test_no_repo_id_names_the_key_and_what_for(project):
    path = project / "build.toml"
    path.write_text(path.read_text().replace('repo-id = "kernels-test/img2gray"\n', ""))
    with pytest.raises(BuildError, match="no repo id to compare with") as e:
        api_diff(project)
    assert e.value.key == "general.hub.repo-id"
