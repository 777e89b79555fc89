"""What a hostile or careless CUTLASS mirror, two builds at once and an offline machine meet
(issue 42, items 1-10). The archives are served from 127.0.0.1 as in the other CUTLASS tests;
nothing is compiled."""

# ruff: noqa: F811 (pytest fixtures imported from cutlass_fixtures are arguments here)
from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

from cutlass_fixtures import (archive_cache, entry, make_archive, members_2_10, no_pypi,  # noqa: F401
                              private_dir, release, served, server)
from cutlass_server import ARCHIVES, TAGS, Slow
from kbuild.core.errors import BuildError
from kbuild.stages.generate import cutlass
from kbuild.stages.generate.cutlass import cache, sources
from kbuild_testing import make_probe_project

TOP = "cutlass-2.10.0/"
PATH = f"{TAGS}/v2.10.0.tar.gz"
R = release("2.10.0")


@pytest.fixture
def mirror(served):
    """`served`, 2.10.0's archive served as it is again after the test."""
    yield served
    served.serve("2.10.0", (ARCHIVES / "cutlass-2.10.0-headers.tar.gz").read_bytes())


def files_of(tree: Path) -> dict[str, str]:
    return {p.relative_to(tree).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in tree.rglob("*") if p.is_file() and p.name != cutlass.STAMP}


def raw_listing_digest(files: dict[str, str]) -> str:
    """The tree digest as it was before issue 42: paths in the listing as they are."""
    return hashlib.sha256("".join(f"{files[p]}  {p}\n" for p in sorted(files)).encode()).hexdigest()


def cached_copy(archive_cache: Path, root: Path) -> Path:
    tree = private_dir(root / "cutlass") / R.key
    shutil.copytree(archive_cache / "cutlass" / R.key, tree)
    return tree


def provision(root: Path, **kw):
    kw.setdefault("note", lambda text: None)
    return cutlass.provision(R, root, **kw)


# --- 1. the tree digest names one set of files -------------------------------------------------

def forged(members) -> tuple[bytes, dict[str, str]]:
    """2.10.0 with two headers A, B that follow each other in the listing replaced by one member
    named `A\\n<sha256 of B>  B` holding A's bytes; and the files that archive gives."""
    data = {i.name[len(TOP):]: d for i, d in members if i.isreg()}
    names = sorted(data)
    a, b = names[100], names[101]
    name = f"{a}\n{hashlib.sha256(data[b]).hexdigest()}  {b}"
    kept = [(i, d) for i, d in members if i.name[len(TOP):] not in (a, b)]
    files = {p: hashlib.sha256(d).hexdigest() for p, d in data.items() if p not in (a, b)}
    files[name] = hashlib.sha256(data[a]).hexdigest()
    return make_archive(kept + [entry(TOP + name, data[a])]), files


def test_a_name_forged_to_pass_for_two_lines_is_refused(mirror, members_2_10, tmp_path):
    archive, files = forged(members_2_10)
    assert raw_listing_digest(files) == R.tree_sha256  # the forgery that fooled the old listing
    assert cutlass.tree_digest(files) != R.tree_sha256  # the escaped listing is not fooled
    mirror.serve("2.10.0", archive)
    root = private_dir(tmp_path / "c")
    with pytest.raises(BuildError) as e:
        provision(root)
    assert "its name holds a control character" in e.value.message
    assert "\n" not in e.value.message and "\\n" in e.value.message
    assert list((root / "cutlass").iterdir()) == []


def sha256sum(tree: Path, names: list[str]) -> str:
    """The digest of GNU sha256sum's listing of `names` in `tree`, in that order."""
    if not shutil.which("sha256sum"):
        pytest.skip("no sha256sum here")
    out = subprocess.run(["sha256sum", "--", *names], cwd=tree, capture_output=True, check=True)
    return hashlib.sha256(out.stdout).hexdigest()


def test_the_digest_is_that_of_gnu_sha256sums_listing(archive_cache, tmp_path):
    tree = tmp_path / "t"
    (tree / "include").mkdir(parents=True)
    names = ["include/a.h", "include/b\nc.h", "include/d\\e.h", "include/f\rg.h", "include/z.h"]
    for n, name in enumerate(names):
        (tree / name).write_text(f"// {n}\n")
    files = {name: hashlib.sha256(f"// {n}\n".encode()).hexdigest() for n, name in enumerate(names)}
    assert cutlass.tree_digest(files) == sha256sum(tree, sorted(names))
    # the pins, recomputed the escaped way from the trees, are unchanged: no header's path has
    # a character sha256sum escapes
    for version in ("2.10.0", "4.5.2"):
        r = release(version)
        real = archive_cache / "cutlass" / r.key
        rels = sorted(p for p in files_of(real) if p not in r.generated_sha256())
        assert sha256sum(real, rels) == r.tree_sha256


@pytest.mark.parametrize("name, reason", [
    (b"include/cutlass/x\ny.h", "include/cutlass/x\\ny.h: its name holds a control character"),
    (b"include/cutlass/caf\xe9.h", "include/cutlass/caf\\xe9.h: its name is not UTF-8"),
])
def test_a_cached_file_with_a_name_no_header_has_is_fetched_again(name, reason, archive_cache,
                                                                  mirror, tmp_path):
    root = private_dir(tmp_path / "c")
    tree = cached_copy(archive_cache, root)
    with open(os.path.join(os.fsencode(tree), name), "wb") as f:
        f.write(b"// planted\n")
    assert cutlass.verify_tree(tree, R) == reason
    warnings: list[str] = []
    assert provision(root, warn=warnings.append) == tree
    assert len(warnings) == 1 and reason in warnings[0] and warnings[0].encode()
    assert files_of(tree) == files_of(archive_cache / "cutlass" / R.key)


# --- 2, 3, 7. the mirror's URL -----------------------------------------------------------------

def test_a_mirror_password_goes_to_the_mirror_alone_and_is_never_shown(mirror, tmp_path,
                                                                       monkeypatch, capsys):
    host = mirror.base.split("//", 1)[1].split("/", 1)[0]
    monkeypatch.setenv(sources.URL_VAR, mirror.base.replace(host, f"bob:hunter2@{host}"))
    port = host.rsplit(":", 1)[1]
    other_host = f"http://localhost:{port}/elsewhere/v2.10.0.tar.gz"  # a redirect to another host
    mirror.routes[PATH] = other_host
    mirror.routes["/elsewhere/v2.10.0.tar.gz"] = (ARCHIVES / "cutlass-2.10.0-headers.tar.gz").read_bytes()
    tree = cutlass.provision(R, private_dir(tmp_path / "c"))
    assert mirror.auth == ["Basic " + base64.b64encode(b"bob:hunter2").decode(), None]
    assert cutlass.read_stamp(tree)["source"] == {"url": f"{mirror.base}/v2.10.0.tar.gz"}
    mirror.routes.pop(PATH)
    with pytest.raises(BuildError) as e:
        cutlass.provision(R, private_dir(tmp_path / "d"))
    assert f"{mirror.base}/v2.10.0.tar.gz: HTTP 404" in e.value.message
    shown = str(e.value) + capsys.readouterr().err
    assert "downloading CUTLASS 2.10.0's headers from" in shown
    assert "hunter2" not in shown and "bob" not in shown


def test_a_mirror_url_with_a_query_gets_the_tag_in_its_path(mirror, tmp_path, monkeypatch):
    monkeypatch.setenv(sources.URL_VAR, mirror.base + "/?token=s3cret")
    tree = provision(private_dir(tmp_path / "c"))
    assert mirror.hits == [f"{PATH}?token=s3cret"]
    assert cutlass.read_stamp(tree)["source"] == {"url": f"{mirror.base}/v2.10.0.tar.gz"}
    mirror.routes.pop(PATH)
    with pytest.raises(BuildError) as e:
        provision(private_dir(tmp_path / "d"))
    assert f"{mirror.base}/v2.10.0.tar.gz: HTTP 404" in e.value.message
    assert "s3cret" not in str(e.value)


def test_a_redirect_loop_is_one_line(mirror, tmp_path):
    mirror.routes[PATH] = PATH
    with pytest.raises(BuildError) as e:
        provision(private_dir(tmp_path / "c"))
    assert f"{mirror.base}/v2.10.0.tar.gz: HTTP 302: too many redirects (a redirect loop)" \
        in e.value.message and "\n" not in e.value.message


BAD_URLS = [
    ("/srv/cutlass-mirror", "KBUILD_CUTLASS_URL=/srv/cutlass-mirror is a folder, not a URL",
     "KBUILD_CUTLASS_URL=file:///srv/cutlass-mirror"),
    ("http://[::1/x", "KBUILD_CUTLASS_URL is not a valid URL: its host or port is malformed",
     "file:// URL"),
    ("http://bob:hunter2@host:port/x", "KBUILD_CUTLASS_URL is not a valid URL", "file:// URL"),
    ("ftp://mirror.invalid/x", "KBUILD_CUTLASS_URL has the scheme ftp: only http://, https:// "
     "and file:// are read", "file:// URL"),
    ("https:///x", "KBUILD_CUTLASS_URL has no host", "file:// URL"),
    ("file://otherhost/srv/x", "KBUILD_CUTLASS_URL names a folder on another host", "file:///path"),
]


@pytest.mark.parametrize("value, message, hint", BAD_URLS)
def test_a_bad_mirror_url_is_refused_naming_the_variable(value, message, hint, monkeypatch, tmp_path,
                                                         no_pypi):
    monkeypatch.setenv(sources.URL_VAR, value)
    with pytest.raises(BuildError) as e:
        provision(private_dir(tmp_path / "c"))
    assert e.value.message.startswith(message) and hint in e.value.hint
    assert "hunter2" not in str(e.value) and list((tmp_path / "c" / "cutlass").iterdir()) == []


def test_the_cli_says_a_bad_mirror_url_in_one_error_line(monkeypatch, tmp_path, capsys):
    """`kbuild generate` of a project with a CUTLASS dependency: exit 2, one `error:` line (and
    its hint), no traceback, no build file written."""
    from kbuild.cli.app import main
    from kbuild.stages import pipeline
    from kbuild_testing import fake_torch_at

    project = make_probe_project(tmp_path / "p", files={"csrc/k.cpp": ""}, kernels={
        "k": {"backend": "cpu", "depends": ["cutlass_2_10"], "src": ["csrc/k.cpp"]}})
    monkeypatch.setattr(pipeline, "read_torch_install", lambda *a, **k: fake_torch_at(tmp_path))
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(private_dir(tmp_path / "cache")))
    monkeypatch.setenv(sources.URL_VAR, "/srv/cutlass-mirror")
    monkeypatch.setattr(sys, "argv", ["kbuild", "generate", str(project), "--backend", "cpu"])
    with pytest.raises(SystemExit) as exited:
        main()
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert exited.value.code == 2 and "Traceback" not in err
    assert lines[0] == "error: KBUILD_CUTLASS_URL=/srv/cutlass-mirror is a folder, not a URL"
    assert lines[1].strip().startswith("hint:") and len(lines) == 2
    assert not (project / ".kbuild").exists() or not list((project / ".kbuild").rglob("plan.cmake"))


# --- 4, 5. names and bombs in the archive ------------------------------------------------------

def test_a_member_name_that_is_not_utf8_is_refused_in_one_line(mirror, members_2_10, tmp_path):
    mirror.serve("2.10.0", make_archive(members_2_10[:30] + [entry(TOP + "include/caf\udce9.h", b"x")]))
    with pytest.raises(BuildError) as e:
        provision(private_dir(tmp_path / "c"))
    assert "cutlass-2.10.0/include/caf\\xe9.h: its name is not UTF-8" in e.value.message
    assert str(e.value).encode()  # printable


def pax_header_of(size: int) -> bytes:
    """A tar whose first member is a pax header announcing `size` bytes (followed by far fewer)."""
    info = tarfile.TarInfo("././@PaxHeader")
    info.type, info.size = tarfile.XHDTYPE, size
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as out:
        out.fileobj.write(info.tobuf(tarfile.USTAR_FORMAT) + bytes(2 << 20))
    return buf.getvalue()


def sparse(members, pax: bool) -> bytes:
    """The first members of an archive, then a sparse member: GNU's old type `S`, or a pax
    header of GNU's sparse format 1.0."""
    info = tarfile.TarInfo(TOP + "examples/sparse.bin")
    info.size = 512
    if pax:
        info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0"}
    else:
        info.type = tarfile.GNUTYPE_SPARSE
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as out:
        for member, data in members[:10]:
            out.addfile(member, io.BytesIO(data) if data is not None else None)
        out.addfile(info, io.BytesIO(b"x" * 512))
    return buf.getvalue()


@pytest.mark.parametrize("archive, message", [
    (lambda m: pax_header_of(3 << 30), "a header record of 3221225472 bytes (more than 1024 KiB)"),
    (lambda m: sparse(m, pax=False), "examples/sparse.bin is a sparse file"),
    (lambda m: sparse(m, pax=True), "it holds a sparse file"),
    (lambda m: make_archive(m + [entry(TOP + "examples/zeros.bin", bytes(24 << 20))]),
     "it unpacks to more than 16 MiB"),
])
def test_what_would_make_the_unpacking_read_without_bound_is_refused(archive, message, mirror,
                                                                     members_2_10, monkeypatch,
                                                                     tmp_path):
    monkeypatch.setattr(sources, "MAX_ARCHIVE_BYTES", 16 << 20)
    mirror.serve("2.10.0", archive(members_2_10))
    root = private_dir(tmp_path / "c")
    with pytest.raises(BuildError) as e:
        provision(root)
    assert message in e.value.message and "nothing was cached" in e.value.hint
    assert list((root / "cutlass").iterdir()) == []


# --- 6. a deadline for the download ------------------------------------------------------------

@pytest.mark.parametrize("answer, why", [
    (Slow(before=30), "no complete answer in time"),
    (Slow(data=b"\x1f\x8b\x08" + bytes(4093), every=0.2),  # a gzip start, trickled
     "the download did not finish in time"),
])
def test_a_download_that_does_not_finish_in_time_is_given_up(answer, why, mirror, monkeypatch,
                                                             tmp_path):
    monkeypatch.setattr(sources, "DEADLINE_S", 1)
    mirror.routes[PATH] = answer
    notes: list[str] = []
    started = time.monotonic()
    with pytest.raises(BuildError) as e:
        provision(private_dir(tmp_path / "c"), note=notes.append)
    assert time.monotonic() - started < 10
    assert f"{mirror.base}/v2.10.0.tar.gz: gave up after 1 s: {why}" in e.value.message
    assert notes == [f"downloading CUTLASS 2.10.0's headers from {mirror.base}/v2.10.0.tar.gz "
                     "(at most 1 s)"]


# --- 8, 9. builds at once; a rejected tree offline ---------------------------------------------

def test_two_builds_that_find_a_rejected_tree_take_turns(archive_cache, mirror, tmp_path,
                                                         monkeypatch):
    """Both see the tree fail before either replaces it: one fetches and installs, the other
    waits, then verifies what the first installed and uses it."""
    root = private_dir(tmp_path / "c")
    tree = cached_copy(archive_cache, root)
    (tree / "include/cutlass/cutlass.h").write_bytes(b"#error planted\n")
    both_saw_it = threading.Barrier(2, timeout=30)
    real, seen = cache.verify_tree, set()

    def verify(path, release):
        problem = real(path, release)
        if threading.get_ident() not in seen:
            seen.add(threading.get_ident())
            both_saw_it.wait()
        return problem
    monkeypatch.setattr(cache, "verify_tree", verify)
    results, errors, warnings = [], [], []

    def build():
        try:
            results.append(provision(root, warn=warnings.append))
        except Exception as e:  # noqa: BLE001 (the failure is the finding)
            errors.append(e)
    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and results == [tree, tree] and len(warnings) == 1
    assert mirror.hits == [PATH] and real(tree, R) is None
    assert [p.name for p in (root / "cutlass").iterdir()] == [R.key]


def test_offline_a_rejected_tree_is_kept_until_a_verified_one_replaces_it(archive_cache, tmp_path,
                                                                          monkeypatch, no_pypi):
    monkeypatch.setenv(sources.URL_VAR, "http://127.0.0.1:9/unreachable")
    root = private_dir(tmp_path / "c")
    tree = cached_copy(archive_cache, root)
    before = files_of(tree)
    (tree / "include").chmod(0o775)  # one folder made group-writable
    warnings: list[str] = []
    with pytest.raises(BuildError) as e:
        provision(root, warn=warnings.append)
    assert "include: other users can write it (mode 775)" in warnings[0]
    assert "could not download CUTLASS 2.10.0's headers" in e.value.message
    assert f"the rejected tree {tree} was kept as it is (never used)" in e.value.hint
    assert files_of(tree) == before and [p.name for p in (root / "cutlass").iterdir()] == [R.key]
    (tree / "include").chmod(0o755)  # fixed as the warning said: used as it is, offline
    assert provision(root, warn=pytest.fail) == tree


# --- 10. a cache path nvcc cannot take ---------------------------------------------------------

def test_a_cache_path_nvcc_cannot_take_names_the_variable_before_any_download(mirror, tmp_path,
                                                                              monkeypatch):
    from kbuild.core import manifest
    from kbuild.stages import plan
    from kbuild_testing import fake_toolkit, fake_torch

    project = make_probe_project(tmp_path / "p", files={"csrc/k.cu": ""}, backends=("cuda",),
                                 kernels={"k": {"backend": "cuda", "depends": ["torch", "cutlass_2_10"],
                                                "src": ["csrc/k.cu"], "cuda-capabilities": ["9.0"]}})
    monkeypatch.setattr(plan, "find_cuda", lambda torch, *a, **k: fake_toolkit("13.0", ["9.0"]))
    p = plan.plan_variant(project, manifest.load(project), fake_torch("2.14.1", cuda="13.0"), "cuda")
    spaced = tmp_path / "my cache"
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(spaced))
    with pytest.raises(BuildError) as e:
        cutlass.kernel_includes(p)
    assert e.value.message.startswith(f"the CUTLASS header cache {spaced} has ' ' in its path")
    assert "set KBUILD_CACHE_DIR to a folder" in e.value.hint and str(project) not in str(e.value)
    assert mirror.hits == [] and not spaced.exists()
