"""The CUTLASS header cache is verified before each use (issue 21): a planted, edited, extended,
symlinked, shared or foreign tree is never compiled in; an unsafe cache root is refused. And
the order of a release's sources (issue 32): the pinned wheel first, the tag archive first
when KBUILD_CUTLASS_URL names a mirror, the other one when the first cannot be reached."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from cutlass_server import ArchiveServer
from kbuild.core.errors import BuildError
from kbuild.stages.generate import cutlass
from kbuild.core import deps
from kbuild.stages.generate.cutlass import sources

HEADERS = {"include/cutlass/cutlass.h": "// cutlass\n", "include/cute/tensor.hpp": "// cute\n",
           "tools/util/include/cutlass/util/helper.h": "// util\n"}
PREFIX = "pkg/cutlass/"
REAL_DOWNLOAD = sources._download_wheel


def digest(files: dict[str, str]) -> str:
    return cutlass.tree_digest({p: hashlib.sha256(t.encode()).hexdigest() for p, t in files.items()})


def wheel_bytes() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for rel, text in HEADERS.items():
            zf.writestr(PREFIX + rel, text)
        zf.writestr(PREFIX + "examples/00_basic/main.cu", "int main() {}\n")
        zf.writestr(PREFIX + "include/../../evil.h", "// escapes\n")
        zf.writestr("pkg/__init__.py", "")
    return buf.getvalue()


def archive_bytes(version: str = "9.9.0") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for rel, text in HEADERS.items():
            info = tarfile.TarInfo(f"cutlass-{version}/{rel}")
            info.size, info.mode = len(text), 0o664
            tf.addfile(info, io.BytesIO(text.encode()))
    return buf.getvalue()


@pytest.fixture
def downloads() -> list[str]:
    """The releases whose wheel was downloaded."""
    return []


@pytest.fixture
def release(monkeypatch, downloads):
    """A release with a wheel made here (its downloads listed in `downloads`)."""
    data = wheel_bytes()
    wheel = cutlass.Wheel("pkg", "1.0", "pkg-1.0-py3-none-any.whl", hashlib.sha256(data).hexdigest(),
                          PREFIX)
    rel = cutlass.Release("9.9.0", digest(HEADERS), wheel=wheel)
    def download(w, r, into):
        downloads.append(r.key)
        into.mkdir(parents=True)
        (into / w.filename).write_bytes(data)
        return into / w.filename

    monkeypatch.setattr(sources, "_download_wheel", download)
    monkeypatch.delenv(sources.URL_VAR, raising=False)
    return rel


@pytest.fixture
def root(tmp_path):
    path = tmp_path / "cache"
    path.mkdir(mode=0o755)
    path.chmod(0o755)
    return path


def files_of(tree: Path) -> dict[str, str]:
    return {p.relative_to(tree).as_posix(): p.read_text() for p in tree.rglob("*")
            if p.is_file() and p.name != cutlass.STAMP}


def provision(release, root):
    warnings: list[str] = []
    tree = cutlass.provision(release, root, warn=warnings.append)
    return tree, warnings


def test_a_fresh_tree_holds_only_the_headers_and_is_reused(release, root, downloads):
    tree, warnings = provision(release, root)
    assert files_of(tree) == HEADERS and warnings == []
    assert (tree / cutlass.STAMP).is_file()
    assert all(not (p.stat().st_mode & 0o022) for p in [tree, *tree.rglob("*")])
    again, warnings = provision(release, root)
    assert again == tree and warnings == [] and downloads == [release.key]
    assert sorted(p.name for p in (root / "cutlass").iterdir()) == [release.key]


def test_a_planted_tree_is_not_used(release, root, downloads):
    planted = root / "cutlass" / release.key / "include" / "cutlass"
    planted.mkdir(parents=True)
    (planted / "cutlass.h").write_text('#error "planted"\n')
    tree, warnings = provision(release, root)
    assert files_of(tree) == HEADERS and downloads == [release.key]
    assert len(warnings) == 1 and "failed verification" in warnings[0]
    assert "provisioning them again" in warnings[0]


@pytest.mark.parametrize("change, reason", [
    (lambda t: (t / "include/cutlass/cutlass.h").write_text('#error "edited"\n'),
     "changed: include/cutlass/cutlass.h"),
    (lambda t: (t / "include/cutlass/evil.h").write_text("// extra\n"),
     "not in the release: include/cutlass/evil.h"),
    (lambda t: (t / "tools/util/include/cutlass/util/helper.h").unlink(),
     "missing: tools/util/include/cutlass/util/helper.h"),
    (lambda t: (t / "include/cute/tensor.hpp").chmod(0o666),
     "include/cute/tensor.hpp: other users can write it (mode 666)"),
    (lambda t: (t / "include").chmod(0o777), "include: other users can write it (mode 777)"),
    (lambda t: ((t / "include/cute/tensor.hpp").unlink(),
                (t / "include/cute/tensor.hpp").symlink_to(t / "include/cutlass/cutlass.h")),
     "include/cute/tensor.hpp is a symbolic link"),
])
def test_a_changed_tree_is_provisioned_again_saying_why(release, root, change, reason, downloads):
    tree, _ = provision(release, root)
    change(tree)
    assert reason in cutlass.verify_tree(tree, release)
    again, warnings = provision(release, root)
    assert again == tree and files_of(tree) == HEADERS
    assert len(warnings) == 1 and reason in warnings[0]
    assert cutlass.verify_tree(tree, release) is None and len(downloads) == 2
    assert [p.name for p in (root / "cutlass").iterdir()] == [release.key]  # nothing left aside


def test_a_symlinked_tree_is_replaced_and_its_target_left_alone(release, root, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(provision(release, root)[0], elsewhere)
    final = root / "cutlass" / release.key
    shutil.rmtree(final)
    final.symlink_to(elsewhere)  # the same headers, reached through a link
    assert cutlass.verify_tree(final, release) == f"{release.key} is a symbolic link"
    tree, warnings = provision(release, root)
    assert not tree.is_symlink() and files_of(tree) == HEADERS
    assert "is a symbolic link" in warnings[0]
    assert files_of(elsewhere) == HEADERS  # the link was removed, not what it points to


@pytest.mark.parametrize("where", ["root", "cutlass"])
@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_a_cache_root_others_can_write_is_refused(release, root, where, mode, downloads):
    path = root if where == "root" else root / "cutlass"
    path.mkdir(exist_ok=True)
    path.chmod(mode)
    with pytest.raises(BuildError) as e:
        cutlass.provision(release, root)
    assert f"{path}: other users can write it (mode {mode:o})" in e.value.message
    assert deps.CACHE_VAR in e.value.hint and downloads == []


def test_a_cache_root_that_cannot_be_written_names_the_folder(release, tmp_path, downloads):
    """CUTLASS headers are needed to compile, so an unusable cache stays an error, but one that
    names the folder and says what to do (not "Read-only file system: cutlass")."""
    blocked = tmp_path / "a file"
    blocked.write_text("")
    with pytest.raises(BuildError) as e:
        cutlass.provision(release, blocked)
    assert e.value.message == (f"the CUTLASS header cache cannot be used: {blocked / 'cutlass'}: "
                               "Not a directory")
    assert f"make {blocked} a folder you can write, or set {deps.CACHE_VAR}" in e.value.hint
    assert downloads == []


def test_a_parent_others_can_write_is_refused_unless_sticky(release, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(BuildError, match="shared: other users can write it"):
        cutlass.provision(release, shared / "cache")
    shared.chmod(0o1777)  # like /tmp: others cannot rename what is yours
    assert files_of(cutlass.provision(release, shared / "cache", warn=print)) == HEADERS


def test_a_symlinked_cutlass_folder_is_refused_and_a_symlinked_root_followed(release, root, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "cutlass").symlink_to(elsewhere)
    with pytest.raises(BuildError, match=r"cutlass: it is a symbolic link"):
        cutlass.provision(release, root)
    (root / "cutlass").unlink()
    link = tmp_path / "link"
    link.symlink_to(root)  # like KBUILD_CACHE_DIR pointing through a link: its target is checked
    tree, _ = provision(release, link)
    assert tree == root.resolve() / "cutlass" / release.key and files_of(tree) == HEADERS


def test_a_root_owned_by_someone_else_is_refused(release, root, monkeypatch, downloads):
    monkeypatch.setattr(deps, "trusted_uids", lambda: {4242})  # as if we were uid 4242
    with pytest.raises(BuildError) as e:
        cutlass.provision(release, root)
    assert f"owned by uid {os.geteuid()}, not by you" in e.value.message and downloads == []


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_really_foreign_owners(release, root):
    tree, _ = provision(release, root)
    os.chown(tree / "include/cutlass/cutlass.h", 4242, 4242)
    assert cutlass.verify_tree(tree, release) == "include/cutlass/cutlass.h: it is owned by uid 4242, not by you"
    tree, warnings = provision(release, root)
    assert cutlass.verify_tree(tree, release) is None and "uid 4242" in warnings[0]
    os.chown(root, 4242, 4242)
    with pytest.raises(BuildError, match="owned by uid 4242"):
        cutlass.provision(release, root)


def test_a_wheel_with_the_wrong_hash_is_refused_and_no_other_source_tried(release, root, monkeypatch):
    import subprocess

    def fetch(args, **kw):
        into = Path(args[args.index("-d") + 1])
        into.mkdir(parents=True, exist_ok=True)
        (into / release.wheel.filename).write_bytes(b"not the wheel")
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(sources, "_download_wheel", REAL_DOWNLOAD)  # the real one, with pip replaced
    monkeypatch.setattr(sources, "capture", fetch)
    monkeypatch.setattr(sources, "_open", lambda url: pytest.fail("the archive was tried"))
    with pytest.raises(BuildError, match=f"expected {release.wheel.sha256}"):
        cutlass.provision(release, root)
    assert list((root / "cutlass").iterdir()) == []


def test_headers_that_differ_from_the_pinned_tree_are_refused(release, root):
    wrong = cutlass.Release(release.version, "0" * 64, wheel=release.wheel)
    with pytest.raises(BuildError, match="expected CUTLASS 9.9.0's 0000"):
        cutlass.provision(wrong, root)
    assert list((root / "cutlass").iterdir()) == []


# --- which source, in which order --------------------------------------------------------------

@pytest.fixture
def mirror(monkeypatch):
    """A local server of the release's tag archive; GitHub's URL is sent there too."""
    with ArchiveServer() as server:
        server.serve("9.9.0", archive_bytes())
        monkeypatch.setattr(sources, "DEFAULT_URL", server.base)
        yield server


def unreachable_pip(monkeypatch):
    import subprocess
    monkeypatch.setattr(sources, "_download_wheel", REAL_DOWNLOAD)
    monkeypatch.setattr(sources, "capture", lambda args, **kw: subprocess.CompletedProcess(
        args, 1, "", "ERROR: Could not find a version that satisfies the requirement pkg==1.0"))


def source_of(tree: Path) -> dict:
    return cutlass.read_stamp(tree)["source"]


def test_the_wheel_comes_first(release, root, mirror, downloads):
    tree, _ = provision(release, root)
    assert source_of(tree) == {"package": "pkg", "version": "1.0", "wheel_sha256": release.wheel.sha256}
    assert downloads == [release.key] and mirror.hits == []


def test_the_archive_when_pypi_cannot_be_reached(release, root, mirror, monkeypatch):
    unreachable_pip(monkeypatch)
    tree, _ = provision(release, root)
    assert files_of(tree) == HEADERS and source_of(tree) == {"url": f"{mirror.base}/v9.9.0.tar.gz"}
    assert all(not (p.stat().st_mode & 0o022) for p in [tree, *tree.rglob("*")])  # not the 664


def test_a_mirror_comes_first_and_the_wheel_after_it(release, root, mirror, monkeypatch, downloads):
    monkeypatch.setenv(sources.URL_VAR, mirror.base)
    tree, _ = provision(release, root)
    assert source_of(tree) == {"url": f"{mirror.base}/v9.9.0.tar.gz"} and downloads == []
    shutil.rmtree(tree)
    mirror.routes.clear()  # the mirror lacks it: the wheel is used
    tree, _ = provision(release, root)
    assert source_of(tree)["package"] == "pkg" and downloads == [release.key]


def test_a_mirror_may_be_a_folder(release, root, tmp_path, monkeypatch, downloads):
    (tmp_path / "mirror" / "v9.9.0.tar.gz").parent.mkdir()
    (tmp_path / "mirror" / "v9.9.0.tar.gz").write_bytes(archive_bytes())
    monkeypatch.setenv(sources.URL_VAR, (tmp_path / "mirror").as_uri())
    tree, _ = provision(release, root)
    assert files_of(tree) == HEADERS and downloads == []


def test_when_no_source_can_be_reached_both_failures_are_named(release, root, mirror, monkeypatch):
    unreachable_pip(monkeypatch)
    mirror.routes.clear()
    with pytest.raises(BuildError) as e:
        cutlass.provision(release, root)
    assert e.value.message == (
        "could not download CUTLASS 9.9.0's headers: pkg 1.0 (pkg-1.0-py3-none-any.whl) from PyPI: "
        "pip could not download it: ERROR: Could not find a version that satisfies the requirement "
        f"pkg==1.0; {mirror.base}/v9.9.0.tar.gz: HTTP 404 Not Found")
    assert sources.URL_VAR in e.value.hint and list((root / "cutlass").iterdir()) == []
