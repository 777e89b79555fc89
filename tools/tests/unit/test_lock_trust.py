"""A lock is data: a tampered or malformed one is one clean error before anything is created,
never options for uv, a file outside the project or another index (issue 21, items 2 and 3).

The installer is intercepted where uv would run (`installer.run`); sockets and subprocesses are
refused, so "nothing created, no network request" is checked, not assumed. In process."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import re
import shutil
import socket
import subprocess
import tempfile
import tomllib
from pathlib import Path
from unittest import mock

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kbuild.cli import app
from kbuild_testing import skip_unless_shipped_locks_fit
from kbuild.core.errors import BuildError
from kbuild.matrix import envs, installer, lock, lockfile, matrix

REPO = Path(__file__).resolve().parents[3]
PLATFORM = "linux-64"
ENV = "torch213-cpu"
skip_unless_shipped_locks_fit(ENV)  # e.g. on the GPU image
BASE_TEXT = (REPO / "locks" / PLATFORM / f"pylock.{ENV}.toml").read_text()
BASE = tomllib.loads(BASE_TEXT)
PLANTED = "http://127.0.0.1:9/simple"
LINE = re.compile(r"[a-z0-9.-]+===[\w.+!-]+( --hash=sha256:[0-9a-f]{64})+")


class UvWouldInstall(Exception):
    """Raised where uv would install: the outcome so far is what the test compares."""


def project(root: Path, text: str | bytes = BASE_TEXT) -> Path:
    """A project holding the repository's pixi.toml and its torch213-cpu lock (as `text`)."""
    (root / "locks" / PLATFORM).mkdir(parents=True)
    shutil.copy2(REPO / "pixi.toml", root / "pixi.toml")
    path = root / "locks" / PLATFORM / f"pylock.{ENV}.toml"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


@contextlib.contextmanager
def intercepted():
    """Records what uv would be run with (and the requirements it would read); refuses every
    socket and subprocess."""
    seen: dict[str, list] = {"runs": [], "network": [], "processes": []}

    def run(cmd, log_file, what, env=None):
        req = Path(cmd[cmd.index("-r") + 1]).read_text() if "-r" in cmd else None
        seen["runs"].append((list(cmd), req))
        if "install" in cmd:
            raise UvWouldInstall

    def connect(sock, address):
        seen["network"].append(address)
        raise OSError("no network in this test")

    def popen(self, *args, **kwargs):
        seen["processes"].append(args)
        raise OSError("no subprocess in this test")

    with mock.patch.object(installer, "run", run), \
            mock.patch.object(socket.socket, "connect", connect), \
            mock.patch.object(subprocess.Popen, "__init__", popen):
        yield seen


def realise(root: Path) -> tuple[BuildError | None, list, dict]:
    """Realises ENV of the project at `root` into root/envs: (error, normalised runs, seen)."""
    folder = root / "envs"
    spec = matrix.load(root).get(ENV)
    with intercepted() as seen:
        try:
            envs.realise(spec, folder, inst=installer.Installer("uv", "uv", {}))
        except UvWouldInstall:
            error = None
        except BuildError as e:
            error = e
    runs = [([a.replace(str(root), "<root>") for a in cmd], req) for cmd, req in seen["runs"]]
    if error is not None:
        assert not folder.exists(), "an environment folder was created before the error"
        assert seen == {"runs": [], "network": [], "processes": []}
        assert "\n" not in error.message and "Traceback" not in str(error)
    else:
        assert seen["network"] == [] and seen["processes"] == []
    return error, runs, seen


def baseline() -> list:
    with tempfile.TemporaryDirectory() as tmp:
        project(Path(tmp))
        error, runs, _ = realise(Path(tmp))
    assert error is None and len(runs) == 2 and runs[1][1]
    return runs


BASELINE = baseline()


def edited(**changes) -> str:
    """The base lock with package fields changed: {"packages[3].marker": value, ...}."""
    doc = copy.deepcopy(BASE)
    for where, value in changes.items():
        set_at(doc, parse_path(where), value)
    return tomli_w.dumps(doc)


def parse_path(where: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.findall(r"[^.\[\]]+", where))


DELETE = object()


def set_at(doc, path: tuple, value) -> None:
    node = doc
    for part in path[:-1]:
        node = node[part]
    if value is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value


def marked_index() -> int:
    return next(i for i, p in enumerate(BASE["packages"]) if p.get("marker"))


# --- item 2: a tampered lock steers nothing -------------------------------------------------------

def test_a_marker_cannot_add_lines_to_what_uv_reads(tmp_path):
    i = marked_index()
    marker = BASE["packages"][i]["marker"]
    path = project(tmp_path, edited(**{f"packages[{i}].marker": (
        f"{marker}\n--extra-index-url {PLANTED}\n-r /etc/hostname\n")}))
    error, _, _ = realise(tmp_path)
    assert error is not None and error.file == path
    assert error.key == f"packages[{i}].marker" and "control character" in error.message


@pytest.mark.parametrize("marker", [
    f"sys_platform == 'linux' --extra-index-url {PLANTED}",   # not a marker
    "sys_platform == 'linux' -r /etc/hostname",
])
def test_a_marker_is_parsed_and_evaluated_here_never_passed_on(tmp_path, marker):
    i = marked_index()
    project(tmp_path, edited(**{f"packages[{i}].marker": marker}))
    error, _, _ = realise(tmp_path)
    assert error is not None and error.key == f"packages[{i}].marker"
    assert "not an environment marker" in error.message


def test_a_marker_that_holds_here_is_installed_without_it(tmp_path):
    """A valid marker (even one with option-like text in a quoted value) never reaches uv."""
    i = marked_index()
    project(tmp_path, edited(**{f"packages[{i}].marker": "os_name != '--index-url http://x/'"}))
    error, runs, _ = realise(tmp_path)
    assert error is None and runs == BASELINE


def test_a_planted_index_is_never_asked(tmp_path):
    """The record's indexes went to uv as they were; now an edited record is a stale lock."""
    doc = copy.deepcopy(BASE)
    doc["tool"]["kbuild"]["indexes"] = [PLANTED]
    path = project(tmp_path, tomli_w.dumps(doc))
    error, _, _ = realise(tmp_path)
    assert error is not None and error.file == path and "no longer matches" in error.message
    assert PLANTED not in str(error)


def test_install_takes_the_matrix_indexes(tmp_path):
    """Even a lock whose record names an index (here forged past the staleness check) installs
    from the matrix's indexes (none for this environment) and pip's, never the lock's."""
    state = envs.lock_states(matrix.load(project(tmp_path).parents[2]).get(ENV))[1]
    forged = dataclasses.replace(state.lock, indexes=(PLANTED,))
    pkgs = envs.packages(lock.LockState(state.target, state.path, "current", forged), [], [])
    with intercepted() as seen, pytest.raises(UvWouldInstall):
        pkgs.install(installer.Installer("uv", "uv", {}), tmp_path / "venv", tmp_path / "log")
    (cmd, _), = seen["runs"]
    assert PLANTED not in cmd and "--extra-index-url" not in cmd


# --- item 3: malformed locks: one error, nothing created ----------------------------------------

def _no_hashes():
    doc = copy.deepcopy(BASE)
    del doc["packages"][0]["wheels"][0]["hashes"]
    return tomli_w.dumps(doc)


MALFORMED = {
    "wheel without hashes": (_no_hashes, "packages[0].wheels[0].hashes"),
    "package without name": (lambda: edited(**{"packages[0].name": DELETE}), "packages[0].name"),
    "packages is a string": (lambda: edited(packages="x"), "packages"),
    "version with a command": (lambda: edited(**{"packages[0].version": "0.8.0; rm -rf"}),
                               "packages[0].version"),
    "hash not hex": (lambda: edited(**{"packages[0].wheels[0].hashes.sha256": "z" * 64}),
                     "packages[0].wheels[0].hashes.sha256"),
    "upper-case name": (lambda: edited(**{"packages[0].name": "Annotated_Types"}), "packages[0].name"),
    "no package at all": (lambda: edited(packages=[]), "packages"),
    "package twice": (lambda: edited(packages=BASE["packages"] + BASE["packages"][:1]), "packages"),
    "record without inputs": (lambda: edited(**{"tool.kbuild.inputs": DELETE}), "tool.kbuild.inputs"),
    "not TOML": (lambda: BASE_TEXT + "\n[[packages\n", None),
    "not UTF-8": (lambda: BASE_TEXT.encode() + b"\n# \xff\xfe\n", None),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_lock_is_one_error_before_anything_is_created(tmp_path, case):
    make, key = MALFORMED[case]
    path = project(tmp_path, make())
    error, _, _ = realise(tmp_path)
    assert error is not None and error.file == path and error.key == key, error
    assert "kbuild lock" in (error.hint or "") or "UTF-8" in error.message


def test_malformed_locks_fail_the_commands_cleanly(tmp_path):
    path = project(tmp_path, edited(**{"packages[0].version": "0.8.0; rm -rf"}))
    runner = CliRunner()
    with mock.patch.object(installer, "run", side_effect=AssertionError("uv ran")):
        created = runner.invoke(app, ["envs", str(tmp_path), "--create", ENV])
    assert isinstance(created.exception, BuildError), created.exception
    assert created.exception.file == path and created.exception.key == "packages[0].version"
    assert not (tmp_path / ".kbuild").exists()
    checked = runner.invoke(app, ["lock", "--check", "--project", str(tmp_path), "--platform", PLATFORM])
    assert checked.exit_code == 1 and "packages[0].version" in checked.output


# --- keep the class out: any mutation of a valid lock ----------------------------------------------

def _paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


PATHS = list(_paths(BASE))
FIELDS = [p for p in PATHS if p[-1] in ("name", "version", "marker", "sha256", "hashes", "wheels",
                                        "sdist", "url") or p[0] in ("tool", "lock-version")
          or len(p) <= 2]
HOSTILE = [f"x\n--extra-index-url {PLANTED}", "-r /etc/hostname", "0.8.0; rm -rf /",
           "sys_platform == 'linux'\n-r /etc/hostname", f"sys_platform == 'linux' --index-url {PLANTED}",
           "python_version < '3'", "sys_platform == 'linux'", "python_version > 'abc'", "torch",
           "numpy", "2.99", "2.13.0+cpu", "1.0 ", PLANTED, "file:///etc/hostname", "a" * 64, "0" * 64,
           "", " ", "\u2028", "\x00", "\u202e", "sha256:" + "0" * 64, "linux-aarch64", "3.12"]
VALUES = st.one_of(
    st.sampled_from(HOSTILE), st.just(DELETE),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=30),
    st.integers(), st.booleans(), st.floats(allow_nan=False),
    st.lists(st.sampled_from(HOSTILE), max_size=3),
    st.dictionaries(st.sampled_from(["sha256", "url", "name", "version", "x"]),
                    st.sampled_from(HOSTILE), max_size=2))


@st.composite
def mutated(draw) -> str | bytes:
    """The base lock, changed in one to three places (a value, a key deleted, a package added or
    duplicated), or its text spliced."""
    if draw(st.integers(0, 9)) == 0:
        at = draw(st.integers(0, len(BASE_TEXT)))
        return BASE_TEXT[:at] + draw(st.sampled_from(HOSTILE + ["\n[[packages]]\n", '"', "=", "]"])) \
            + BASE_TEXT[at:]
    doc = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["set", "set", "set", "add"]))
        if kind == "add":
            if not isinstance(doc.get("packages"), list):
                continue  # an earlier change replaced the package list
            pkg = copy.deepcopy(draw(st.sampled_from(BASE["packages"])))
            pkg["name"] = draw(st.sampled_from(["extra-pkg", pkg["name"], *HOSTILE[:3]]))
            doc["packages"].append(pkg)
            continue
        path = draw(st.sampled_from(FIELDS) | st.sampled_from(PATHS))
        try:
            set_at(doc, path, draw(VALUES))
        except (KeyError, IndexError, TypeError):
            pass  # an earlier change removed the way there
    try:
        return tomli_w.dumps(doc)
    except (TypeError, ValueError):
        return BASE_TEXT


def _pins(packages) -> dict:
    return {p.name: (p.version, p.marker, tuple(p.hashes)) for p in packages}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=mutated())
def test_any_mutation_realises_the_same_or_is_one_clean_error(text):
    """Every outcome: a clean error with nothing created and no network request or process; or
    the unmutated lock's install exactly; or (a valid lock of other pins) every line still a pin
    and its hashes, from the matrix's indexes, and `kbuild lock --check` reporting the change."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = project(root, text)
        error, runs, _ = realise(root)  # asserts the error case's guarantees
        if error is not None:
            assert Path(error.file) == path, error
            return
        if runs == BASELINE:
            return
        assert [cmd for cmd, _ in runs] == [cmd for cmd, _ in BASELINE]  # the matrix's sources
        lines = runs[1][1].splitlines()
        assert all(LINE.fullmatch(ln) for ln in lines), lines
        ours = lockfile.read(path)
        base = lockfile.read(REPO / "locks" / PLATFORM / f"pylock.{ENV}.toml")
        reported = lock.differences(ours.packages, base.packages)
        fewer_files = _pins(ours.packages).keys() == _pins(base.packages).keys() and all(
            set(p.hashes) <= set(_pins(base.packages)[p.name][2]) and p.hashes
            and p.version == _pins(base.packages)[p.name][0] for p in ours.packages)
        assert reported or fewer_files, "a changed lock that --check would not report"
