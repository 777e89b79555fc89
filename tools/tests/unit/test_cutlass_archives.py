"""CUTLASS from NVIDIA's tag archives (issue 32), served from 127.0.0.1 at GitHub's paths: each
release upstream pins and no wheel gives provisions with its tree digest (2.10.0 with the
version.h CMake would have generated); an archive that is not the release is refused with
nothing cached; the cached trees are verified on every use; a cache filled here is used as is
on a machine without network."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from cutlass_fixtures import (REDIRECTED, VERSIONS, archive_cache, entry, make_archive,  # noqa: F401
                              members_2_10, no_pypi, private_dir, release, served, server)
from cutlass_server import ARCHIVES, TAGS
from kbuild.core.errors import BuildError
from kbuild.stages.generate import cutlass
from kbuild.stages.generate.cutlass import cache, sources
from kbuild_testing import REPO

TOP = "cutlass-2.10.0/"
HEADER = TOP + "include/cutlass/cutlass.h"


def tree_files(tree: Path) -> dict[str, str]:
    return {p.relative_to(tree).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in tree.rglob("*") if p.is_file() and p.name != cutlass.STAMP}


@pytest.mark.parametrize("version", VERSIONS)
def test_each_release_provisions_with_the_digest_of_its_tag(archive_cache, version):  # noqa: F811
    r = release(version)
    tree = archive_cache / "cutlass" / r.key
    files = tree_files(tree)
    generated = r.generated_sha256()
    fixture = {a["version"]: a for a in json.loads((ARCHIVES / "archives.json").read_text())}[version]
    assert cutlass.tree_digest({p: s for p, s in files.items() if p not in generated}) \
        == r.tree_sha256 == fixture["tree_digest"]
    assert len(files) == fixture["files"] + len(generated)
    assert r.commit == fixture["commit"] and r.tag == fixture["tag"]
    assert cutlass.verify_tree(tree, r) is None
    # GitHub's archives carry 664/775: the tree has the builder's own modes
    assert {oct(p.stat().st_mode & 0o777) for p in tree.rglob("*") if p.is_file()} == {"0o644"}
    assert {oct(p.stat().st_mode & 0o777) for p in [tree, *tree.rglob("*")] if p.is_dir()} == {"0o755"}
    stamp = json.loads((tree / cutlass.STAMP).read_text())
    assert stamp["source"] == {"url": f"{stamp['source']['url'].split(TAGS)[0]}{TAGS}/v{version}.tar.gz"}
    assert stamp["tree_sha256"] == r.tree_sha256 and stamp["generated"] == generated


def test_version_h_says_the_release_and_2_10_gets_the_generated_one(archive_cache):  # noqa: F811
    for version in VERSIONS:
        text = (archive_cache / "cutlass" / release(version).key / cutlass.releases.VERSION_H).read_text()
        defines = dict(re.findall(r"#define CUTLASS_(MAJOR|MINOR|PATCH) (\d+)", text))
        assert ".".join(defines[k] for k in ("MAJOR", "MINOR", "PATCH")) == version
    r = release("2.10.0")
    assert r.generate_version_h and not any(x.generate_version_h for x in cutlass.RELEASES if x is not r)
    text = (archive_cache / "cutlass" / r.key / "include/cutlass/version.h").read_text()
    for line in ("#define CUTLASS_MAJOR 2", "#define CUTLASS_MINOR 10", "#define CUTLASS_PATCH 0",
                 "#define CUTLASS_BUILD 0", "#define CUTLASS_VERSION ((CUTLASS_MAJOR)*100",
                 'std::string version = "2.10.0";', 'return "";'):
        assert line in text
    for fn in ("getVersion", "getVersionMajor", "getVersionMinor", "getVersionPatch",
               "getVersionBuild", "getVersionString", "getGitRevision"):
        assert f" {fn}()" in text
    stamp = json.loads((archive_cache / "cutlass" / r.key / cutlass.STAMP).read_text())
    assert stamp["generated"] == {"include/cutlass/version.h": hashlib.sha256(text.encode()).hexdigest()}
    with tarfile.open(ARCHIVES / "cutlass-2.10.0-headers.tar.gz") as archive:  # not in the tag
        assert TOP + "include/cutlass/version.h" not in archive.getnames()


def test_the_redirect_is_followed(served, tmp_path):  # noqa: F811
    cutlass.provision(release(REDIRECTED[0]), private_dir(tmp_path / "c"))
    assert served.hits == [f"{TAGS}/v{REDIRECTED[0]}.tar.gz",
                           served.routes[f"{TAGS}/v{REDIRECTED[0]}.tar.gz"]]


def altered(members, *, drop=(), change=None, add=(), first=()):
    """The archive with members dropped, one changed, some added at the end; or, for refusals
    at the first member (`first`), those followed by a few of the archive's."""
    if first:
        return make_archive(list(first) + members[:20])
    out = []
    for info, data in members:
        if info.name in drop:
            continue
        if change and info.name == change[0]:
            data = change[1](data)
        out.append((info, data))
    return make_archive(out + list(add))


NEGATIVE = {
    "one byte of a header changed": (dict(change=(HEADER, lambda d: b"/" + d[1:] if d[:1] != b"/" else b" " + d[1:])),
                                     "have tree sha256"),
    "a file added": (dict(add=[entry(TOP + "include/cutlass/extra.h", b"// extra\n")]), "have tree sha256"),
    "a file removed": (dict(drop={TOP + "tools/util/include/cutlass/util/host_tensor.h"}), "have tree sha256"),
    "a member outside the top folder": (dict(first=[entry("elsewhere/include/x.h", b"")]),
                                        "'elsewhere/include/x.h' is outside its top folder cutlass-2.10.0/"),
    "a member with ..": (dict(first=[entry(TOP + "include/../../escape.h", b"")]), "is outside its top folder"),
    "an absolute member": (dict(first=[entry("/tmp/absolute.h", b"")]), "is outside its top folder"),
    "a symbolic link": (dict(first=[entry(TOP + "include/cutlass/link.h", type=tarfile.SYMTYPE,
                                        linkname="/etc/passwd")]),
                        f"{TOP}include/cutlass/link.h is a symbolic link"),
    "a hard link": (dict(first=[entry(TOP + "include/cutlass/hard.h", type=tarfile.LNKTYPE,
                                    linkname=HEADER)]), f"{TOP}include/cutlass/hard.h is a hard link"),
    "a device": (dict(first=[entry(TOP + "include/cutlass/dev", type=tarfile.CHRTYPE)]), "is not a plain file"),
}


@pytest.mark.parametrize("case", NEGATIVE)
def test_an_archive_that_is_not_the_release_is_refused_and_nothing_cached(case, served, members_2_10,  # noqa: F811
                                                                          tmp_path):
    kwargs, message = NEGATIVE[case]
    served.serve("2.10.0", altered(members_2_10, **kwargs))
    root = private_dir(tmp_path / "c")
    try:
        with pytest.raises(BuildError) as e:
            cutlass.provision(release("2.10.0"), root)
    finally:
        served.serve("2.10.0", (ARCHIVES / "cutlass-2.10.0-headers.tar.gz").read_bytes())
    assert message in e.value.message and "nothing was cached" in e.value.hint
    assert list((root / "cutlass").iterdir()) == [] and not (tmp_path / "escape.h").exists()


@pytest.mark.parametrize("answer, message", [
    (404, "v2.10.0.tar.gz: HTTP 404"),
    ("truncated", "it is not a complete gzip'd tar archive"),
    ("broken off", "the download broke off"),
])
def test_a_missing_or_broken_download_is_refused_and_nothing_cached(answer, message, served, tmp_path):  # noqa: F811
    data = (ARCHIVES / "cutlass-2.10.0-headers.tar.gz").read_bytes()
    path = f"{TAGS}/v2.10.0.tar.gz"
    served.routes[path] = {"truncated": data[: len(data) // 2],
                           "broken off": (data[: len(data) // 2], len(data))}.get(answer, answer)
    root = private_dir(tmp_path / "c")
    try:
        with pytest.raises(BuildError) as e:
            cutlass.provision(release("2.10.0"), root)
    finally:
        served.routes[path] = data
    assert message in e.value.message
    assert list((root / "cutlass").iterdir()) == []


def test_members_outside_the_header_trees_are_read_past(served, members_2_10, tmp_path):  # noqa: F811
    extra = [entry(TOP + "examples/link", type=tarfile.SYMTYPE, linkname="../include"),
             entry(TOP + "CMakeLists.txt", b"message(FATAL_ERROR never run)\n"),
             entry(TOP + "tools/util/CMakeLists.txt", b"")]
    served.serve("2.10.0", altered(members_2_10, add=extra))
    try:
        tree = cutlass.provision(release("2.10.0"), private_dir(tmp_path / "c"))
    finally:
        served.serve("2.10.0", (ARCHIVES / "cutlass-2.10.0-headers.tar.gz").read_bytes())
    assert sorted(p.name for p in tree.iterdir()) == [cutlass.STAMP, "include", "tools"]
    assert not [p for p in tree.rglob("*") if p.name in ("CMakeLists.txt", "link")]
    assert cutlass.verify_tree(tree, release("2.10.0")) is None


@pytest.mark.parametrize("tamper, reason", [
    (lambda t: (t / "include/cutlass/cutlass.h").write_bytes(b"#error planted\n"),
     "changed: include/cutlass/cutlass.h"),
    (lambda t: (t / "include/cutlass/version.h").write_text("#define CUTLASS_MAJOR 9\n"),
     "changed: include/cutlass/version.h"),
    (lambda t: (t / "include/cutlass/version.h").unlink(), "missing: include/cutlass/version.h"),
    (lambda t: (t / "include/cutlass/cutlass.h").chmod(0o664),
     "include/cutlass/cutlass.h: other users can write it (mode 664)"),
])
def test_a_tampered_cached_tree_is_fetched_again(tamper, reason, archive_cache, served, tmp_path):  # noqa: F811
    r = release("2.10.0")
    root = private_dir(tmp_path / "c")
    tree = private_dir(root / "cutlass") / r.key
    shutil.copytree(archive_cache / "cutlass" / r.key, tree)
    tamper(tree)
    assert reason in cutlass.verify_tree(tree, r)
    warnings = []
    assert cutlass.provision(r, root, warn=warnings.append) == tree
    assert len(warnings) == 1 and reason in warnings[0] and served.hits == [f"{TAGS}/v2.10.0.tar.gz"]
    assert cutlass.verify_tree(tree, r) is None
    assert tree_files(tree) == tree_files(archive_cache / "cutlass" / r.key)


def test_a_cache_filled_by_prefetch_is_used_as_is_offline(served, tmp_path, monkeypatch):  # noqa: F811
    """run_corpus.py --prefetch DIR PROJECTS fills a cache (here from the local archives); the
    copy carried to a machine without network is used without any download."""
    spec = importlib.util.spec_from_file_location("run_corpus", REPO / "tests/compat/run_corpus.py")
    run_corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_corpus)
    projects = tmp_path / "projects"
    for name, dep in (("old", "cutlass_2_10"), ("new", "cutlass_4_0")):
        (projects / name).mkdir(parents=True)
        (projects / name / "build.toml").write_text(f'[kernel.k]\ndepends = ["torch", "{dep}"]\n')
    monkeypatch.delenv(sources.URL_VAR)
    filled = private_dir(tmp_path / "here")
    run_corpus.prefetch(filled, [projects], archives=ARCHIVES)  # its own server, then stopped
    assert sorted(p.name for p in (filled / "cutlass").iterdir()) == [release("2.10.0").key,
                                                                     release("4.0.0").key]
    carried = private_dir(tmp_path / "there") / "cache"
    shutil.copytree(filled, carried)
    monkeypatch.setenv(sources.URL_VAR, "http://127.0.0.1:9/unreachable")  # nothing answers there
    for version in ("2.10.0", "4.0.0"):
        warnings = []
        tree = cutlass.provision(release(version), carried, warn=warnings.append)
        assert tree == carried.resolve() / "cutlass" / release(version).key and warnings == []
    assert served.hits == []
    with pytest.raises(BuildError, match="could not download CUTLASS 3.9.2's headers"):
        cutlass.provision(release("3.9.2"), carried)  # not carried: the offline machine says so


def test_the_pins_are_the_fixtures_digests():
    listed = json.loads((ARCHIVES / "archives.json").read_text()) if ARCHIVES.is_dir() else []
    if not listed:
        pytest.skip(f"no {ARCHIVES}/archives.json beside this checkout")
    for a in listed:
        assert cutlass.CUTLASS[a["name"]].tree_sha256 == a["tree_digest"]
        assert cutlass.CUTLASS[a["name"]].version == a["version"]


def test_sources_are_the_archive_alone_without_a_wheel_and_the_mirror_first_when_set(monkeypatch):
    monkeypatch.delenv(sources.URL_VAR, raising=False)
    assert [s.describe() for s in sources.sources(release("4.0.0"))] == \
        ["https://github.com/NVIDIA/cutlass/archive/refs/tags/v4.0.0.tar.gz"]
    with_wheel = cutlass.CUTLASS["cutlass_3_8"]
    assert [bool(s.wheel) for s in sources.sources(with_wheel)] == [True, False]
    monkeypatch.setenv(sources.URL_VAR, "https://mirror.invalid/cutlass/")
    assert [s.describe() for s in sources.sources(with_wheel)][0] == \
        "https://mirror.invalid/cutlass/v3.8.0.tar.gz"
    assert [bool(s.wheel) for s in sources.sources(with_wheel)] == [False, True]
    assert cache.tree_path(with_wheel, Path("/c")) == Path("/c/cutlass") / with_wheel.key
