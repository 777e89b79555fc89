"""Locks of the PyPI realisation (kbuild.matrix.lock): staleness against pixi.toml, the committed
locks, what realising from a lock installs, and the provenance a variant records. In process."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbuild.core.envstamp import environment_provenance
from kbuild.cli import app
from kbuild.core.errors import BuildError
from kbuild.matrix import envs, lock, lockfile, matrix, realise

REPO = Path(__file__).resolve().parents[3]
PLATFORM = "linux-64"


def project_with_locks(tmp_path: Path) -> Path:
    """A folder holding a copy of the repository's pixi.toml and its locks."""
    root = tmp_path / "p"
    root.mkdir()
    shutil.copy2(REPO / "pixi.toml", root / "pixi.toml")
    shutil.copytree(REPO / "locks", root / "locks")
    return root


def bump_kernels(root: Path) -> None:
    """An edit of pixi.toml that changes every environment's requirements."""
    path = root / "pixi.toml"
    path.write_text(path.read_text().replace('kernels = "==0.17.2"', 'kernels = "==0.17.1"'))


def test_committed_locks_match_pixi_toml():
    """What CI's `kbuild lock --check` verifies, and that something is locked at all."""
    mx = matrix.load(REPO)
    problems, unlocked = lock.check(mx, PLATFORM)
    assert problems == []
    locked = {s.target.name for e in mx.envs for s in lock.states(e, PLATFORM) if s.state == "current"}
    assert {"torch213-cpu", "torch214-cu130", "toolkit-cu130"} <= locked
    assert "torch27-cu126" in unlocked


def test_default_matrix_is_ours_with_the_same_locks():
    ours, default = matrix.load(REPO), matrix._parse(matrix.DEFAULT_MATRIX, builtin=True)
    def fields(e):
        return (e.name, e.torch_version, e.torch_index, e.cuda, e.platforms, e.pypi_extra,
                e.toolkit_wheels)
    assert [fields(e) for e in default.envs] == [fields(e) for e in ours.envs]
    mine = {p.relative_to(ours.locks): p.read_bytes() for p in ours.locks.rglob("*.toml")}
    shipped = {p.relative_to(default.locks): p.read_bytes() for p in default.locks.rglob("*.toml")}
    assert mine and shipped == mine


def test_project_without_pixi_toml_gets_the_default_matrix(tmp_path):
    mx = matrix.load(tmp_path)
    assert mx.default and mx.path == matrix.DEFAULT_MATRIX
    assert "torch214-cu130" in [e.name for e in mx.envs]
    with pytest.raises(BuildError, match="pixi.toml"):
        realise.realiser("pixi", mx, envs_dir=tmp_path, log_dir=tmp_path)
    with pytest.raises(BuildError, match="not found"):  # an explicit file must exist
        matrix.load(tmp_path / "pixi.toml")


def test_lock_goes_stale_when_pixi_toml_changes(tmp_path):
    root = project_with_locks(tmp_path)
    spec = matrix.load(root).get("torch214-cu130")
    assert {s.target.name: s.state for s in lock.states(spec, PLATFORM)} == {
        "toolkit-cu130": "current", "torch214-cu130": "current"}
    bump_kernels(root)
    spec = matrix.load(root).get("torch214-cu130")
    states = {s.target.name: s for s in lock.states(spec, PLATFORM)}
    assert states["torch214-cu130"].state == "stale"
    assert states["toolkit-cu130"].state == "current"  # the toolkit's requirements did not change
    problems, _ = lock.check(matrix.load(root), PLATFORM)
    assert any(p.startswith("torch214-cu130: pylock.torch214-cu130.toml no longer matches")
               and p.endswith("kbuild lock torch214-cu130") for p in problems)


def test_stale_lock_is_refused_before_anything_is_created(tmp_path):
    root = project_with_locks(tmp_path)
    bump_kernels(root)
    spec = matrix.load(root).get("torch214-cu130")
    folder = tmp_path / "envs"
    with pytest.raises(BuildError) as e:
        envs.realise(spec, folder, inst=envs.Installer("uv", "uv-is-not-run"))
    assert e.value.file == root / "locks" / PLATFORM / "pylock.torch214-cu130.toml"
    assert "kbuild lock torch214-cu130" in str(e.value)
    assert not folder.exists()  # not even the toolkit


def test_build_all_refuses_a_stale_lock_up_front(tmp_path):
    root = project_with_locks(tmp_path)
    bump_kernels(root)
    specs = matrix.load(root).select(["torch213-cpu"])
    realiser = realise.PypiRealiser.__new__(realise.PypiRealiser)  # no installer needed to refuse
    with pytest.raises(BuildError, match="torch213-cpu: pylock.torch213-cpu.toml no longer matches"):
        realiser.prepare(specs)


def test_lock_check_command_exit_codes(tmp_path):
    """Stale and orphaned locks fail `--check` (exit 1). Only current locks are re-derived, and
    with the toolkit lock gone none is current here: nothing is resolved (test_lock_check.py
    re-derives against an index on 127.0.0.1)."""
    root = project_with_locks(tmp_path)
    (root / "locks" / PLATFORM / "pylock.toolkit-cu130.toml").unlink()
    bump_kernels(root)
    (root / "locks" / PLATFORM / "pylock.torch99-cpu.toml").write_text("")
    stale = CliRunner().invoke(app, ["lock", "--check", "--project", str(root), "--platform", PLATFORM])
    assert stale.exit_code == 1, stale.output
    assert "kbuild lock torch213-cpu" in stale.output
    assert "pylock.torch99-cpu.toml: no environment" in stale.output


def test_lock_installs_exact_hashed_files():
    locked = lockfile.read(REPO / "locks" / PLATFORM / "pylock.torch213-cpu.toml")
    lines = locked.requirement_lines()
    assert len(lines) == len(locked.packages) > 10  # every marker holds on linux-64 with 3.11
    torch = next(ln for ln in lines if ln.startswith("torch==="))
    wheel = next(p for p in locked.packages if p.name == "torch").wheels[0]
    assert torch == f"torch===2.13.0+cpu --hash=sha256:{wheel.hashes.sha256}"
    # markers are evaluated here, never handed on: each line is a pin and its hashes
    assert all(re.fullmatch(r"[a-z0-9.-]+===[\w.+!-]+( --hash=sha256:[0-9a-f]{64})+", ln) for ln in lines)
    marked = next(p for p in locked.packages if p.marker)
    elsewhere = dataclasses.replace(locked, packages=tuple(
        p.model_copy(update={"marker": "sys_platform == 'win32'"}) if p is marked else p
        for p in locked.packages))
    assert [ln.split("===")[0] for ln in elsewhere.requirement_lines()] == [
        p.name for p in locked.packages if p is not marked]
    # and the lock names public sources only, for the platform and Python it says
    text = locked.path.read_text()
    assert "file:" not in text and "/opt/" not in text
    assert (locked.platform, locked.python) == (PLATFORM, "3.11")


def test_local_torch_wheel_is_recorded_at_its_index():
    target = lock.Target("torch213-cpu", ("torch==2.13.0+cpu",), "3.11", PLATFORM,
                         torch_index="https://download.pytorch.org/whl/cpu")
    uv_output = """lock-version = "1.0"
created-by = "uv"

[[packages]]
name = "torch"
version = "2.13.0+cpu"
wheels = [{ url = "file:///somewhere/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", hashes = { sha256 = "00" } }]
"""
    doc = tomllib.loads(lock._publish(uv_output, target))
    assert doc["packages"][0]["wheels"][0]["url"] == (
        "https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert doc["tool"]["kbuild"]["inputs"] == target.inputs_hash
    with pytest.raises(BuildError, match="only in a local folder"):
        lock._publish(uv_output.replace('name = "torch"', 'name = "numpy"'), target)


def test_constraints_of_this_machine_hold_for_locks(tmp_path):
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch<=2.13.0\n")
    inst = envs.Installer("uv", "uv", {"constraint": [str(constraints)]})
    inst.check_constraints(lockfile.read(REPO / "locks" / PLATFORM / "pylock.torch213-cpu.toml"))
    with pytest.raises(BuildError, match=rf"pins torch 2.14.1, which pip's constraint `torch<=2.13.0` "
                                         rf"in {re.escape(str(constraints))} excludes here"):
        inst.check_constraints(lockfile.read(REPO / "locks" / PLATFORM / "pylock.torch214-cu130.toml"))


def test_a_constraint_that_excludes_the_pinned_torch_is_named_with_its_file(tmp_path, monkeypatch):
    """Issue 42: with `torch<=2.14.1` in pip's constraints, `kbuild lock` said there was no
    torch===2.15.0 wheel on PyPI; it is there, the user's constraint excludes it. Said naming
    the constraint and its file (with and without the PyTorch index), without asking uv."""
    from kbuild.matrix import lockall

    constraints = tmp_path / "constraints.txt"
    constraints.write_text("# the releases on this disk\ntorch<=2.14.1\ntorchvision<=0.29.1\n")
    inst = envs.Installer("uv", "uv", {"constraint": [str(constraints)]})
    mx = matrix.load(REPO)
    new, old = mx.get("torch215-cu132"), mx.get("torch214-cu130")
    monkeypatch.setattr(envs, "_probe", lambda inst, req, *a: pytest.fail(f"{req} was resolved")
                        if "2.15" in req else ("cu130", "torch 2.14.1"))
    said = envs.availability(new, inst, tmp_path)
    assert not said.ok and said.torch_note == "excluded by a constraint"
    assert said.reason == (f"pip's constraint `torch<=2.14.1` in {constraints} excludes torch 2.15.0 "
                           "here (remove it there to realise or lock torch215-cu132)")
    assert "excludes torch 2.15.0+cu132 here" in envs.availability(new, inst, tmp_path,
                                                                   torch_index=True).reason
    assert envs.availability(old, inst, tmp_path).ok  # within the cap: asked as before
    monkeypatch.setattr(envs, "installer", lambda *a: inst)
    (row,) = lockall.lock_envs(mx, [new], PLATFORM, envs_dir=tmp_path)
    assert row.status == "skipped" and row.reason == said.reason
    with pytest.raises(BuildError) as e:  # `build --env`: refused before anything is created
        envs.realise(new, tmp_path / "envs", inst=inst)
    assert e.value.message == f"torch215-cu132: {said.reason}" and not (tmp_path / "envs").exists()


def stamp(folder: Path, **fields) -> None:
    folder.mkdir(parents=True)
    (folder / envs.STAMP).write_text(json.dumps(fields))


def test_provenance_names_the_environment_and_its_locks(tmp_path):
    stamp(tmp_path / "torch214-cu130", key="k", env="torch214-cu130",
          lock={"file": "pylock.torch214-cu130.toml", "sha256": "sha256:aa"})
    stamp(tmp_path / "toolkit-cu130", key="k", lock={"sha256": "sha256:bb"})
    cuda_home = tmp_path / "toolkit-cu130" / "lib" / "python3.11" / "site-packages" / "nvidia" / "cu13"
    cuda_home.mkdir(parents=True)
    python = str(tmp_path / "torch214-cu130" / "bin" / "python")
    assert environment_provenance(python, cuda_home) == {
        "name": "torch214-cu130", "lock": "sha256:aa", "toolkit-lock": "sha256:bb"}
    stamp(tmp_path / "torch213-cpu", key="k", env="torch213-cpu", requirements=["torch"])
    assert environment_provenance(str(tmp_path / "torch213-cpu" / "bin" / "python"), None) == {
        "name": "torch213-cpu", "lock": None}  # resolved afresh: no lock to name
    assert environment_provenance("/usr/bin/python3", None) is None


def test_locked_refuses_what_has_no_lock(tmp_path):
    """`build-all --locked`: an environment without a lock is an error, not a fresh resolution."""
    spec = matrix.load(REPO).get("torch210-cu130")  # not realisable here, so never locked here
    toolkit, env = envs.lock_states(spec)
    assert toolkit.state == "current" and env.state == "missing"
    with pytest.raises(BuildError, match="torch210-cu130 is not locked"):
        envs.packages(env, ["torch===2.10.0"], [], locked=True)
    assert envs.packages(env, ["torch===2.10.0"], []).requirements == ("torch===2.10.0",)
    assert envs.packages(toolkit, [], [], locked=True).lock.name == "toolkit-cu130"


def test_envs_and_lock_on_a_project_without_pixi_toml(tmp_path):
    runner = CliRunner()
    listed = runner.invoke(app, ["envs", str(tmp_path), "--json", "--no-probe"])
    assert listed.exit_code == 0, listed.output
    assert "has no pixi.toml: using the builder's default matrix" in listed.stderr
    rows = json.loads(listed.stdout)
    assert [r["name"] for r in rows] == [e.name for e in matrix.load(REPO).envs]
    assert next(r for r in rows if r["name"] == "torch214-cu130")["locks"] == {
        "toolkit-cu130": "current", "torch214-cu130": "current"}
    refused = runner.invoke(app, ["lock", "--project", str(tmp_path)])
    assert refused.exit_code == 1 and isinstance(refused.exception, BuildError)
    assert "locks ship with the builder" in str(refused.exception)
    assert not (tmp_path / "locks").exists()
