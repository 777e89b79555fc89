"""publish/verify.py: whose signatures `kbuild verify` trusts, from its options or from
[tool.kbuild.signing] in the project's pixi.toml (never build.toml)."""

from __future__ import annotations

import pytest

from kbuild.core.errors import BuildError
from kbuild.publish.verify import trusted_signers

URI = "https://github.com/my-org/my-kernel/.github/workflows/build-variants.yml@refs/tags/v1.0.0"


def pixi(tmp_path, table: str):
    (tmp_path / "pixi.toml").write_text('[workspace]\nname = "x"\n\n' + table)
    return tmp_path


def test_from_pixi_toml(tmp_path):
    other = "https://github.com/my-org/my-kernel/.github/workflows/x.yml@refs/heads/main"
    project = pixi(tmp_path, '[tool.kbuild.signing]\nrepository = "my-org/my-kernel"\n'
                             'workflows = [".github/workflows/build-variants.yml@refs/tags/v1.0.0",'
                             f' "{other}"]\n')
    signers = trusted_signers(project, None, [])
    assert signers.repository == "my-org/my-kernel"
    assert signers.workflows == (URI, other)
    policy = signers.policy()
    assert policy.repo_id == "my-org/my-kernel" and policy.signer_uris == list(signers.workflows)


def test_options_win_over_the_file(tmp_path):
    project = pixi(tmp_path, '[tool.kbuild.signing]\nrepository = "a/b"\n'
                             'workflows = [".github/workflows/w.yml@refs/heads/main"]\n')
    signers = trusted_signers(project, "my-org/my-kernel",
                              [".github/workflows/build-variants.yml@refs/tags/v1.0.0"])
    assert (signers.repository, signers.workflows) == ("my-org/my-kernel", (URI,))


@pytest.mark.parametrize("table, key", [
    ("", "tool.kbuild.signing.repository"),
    ('[tool.kbuild.signing]\nrepository = "my-org/my-kernel"\n', "tool.kbuild.signing.workflows"),
    ('[tool.kbuild.signing]\nrepository = "../x"\nworkflows = ["w"]\n',
     "tool.kbuild.signing.repository"),
    ('[tool.kbuild.signing]\nrepository = "a/b"\nworkflows = "w"\n',
     "tool.kbuild.signing.workflows"),
    ('[tool.kbuild.signing]\nrepository = "a/b"\nworkflows = [".github/workflows/w.yml"]\n',
     "tool.kbuild.signing.workflows"),  # no ref
    ('[tool.kbuild.signing]\nrepository = "a/b"\n'
     'workflows = ["https://evil.example/w.yml@refs/x"]\n', "tool.kbuild.signing.workflows"),
    ("[tool.kbuild]\nsigning = 3\n", "tool.kbuild.signing"),
])
def test_bad_configuration_is_one_error_naming_the_key(tmp_path, table, key):
    project = pixi(tmp_path, table)
    with pytest.raises(BuildError) as caught:
        trusted_signers(project, None, [])
    assert caught.value.key == key and caught.value.file == project / "pixi.toml"


def test_bad_options_name_the_option(tmp_path):
    with pytest.raises(BuildError) as caught:
        trusted_signers(tmp_path, "not a repo", ["x@refs/heads/main"])
    assert caught.value.key == "--repository" and caught.value.file is None
    with pytest.raises(BuildError) as caught:
        trusted_signers(tmp_path, "a/b", [".github/workflows/w.yml"])
    assert caught.value.key == "--workflow"


@pytest.mark.parametrize("text, key", [
    ("tool = 5\n", "tool"),
    ("[tool]\nkbuild = 5\n", "tool.kbuild"),
    ('tool = ["kbuild"]\n', "tool"),
])
def test_a_tool_or_kbuild_key_that_is_not_a_table_is_one_error_naming_it(tmp_path, text, key):
    (tmp_path / "pixi.toml").write_text(text + '\n[workspace]\nname = "x"\n')
    with pytest.raises(BuildError) as caught:
        trusted_signers(tmp_path, None, [])
    assert (caught.value.key, caught.value.file) == (key, tmp_path / "pixi.toml")
    assert caught.value.message.startswith("must be a table")
