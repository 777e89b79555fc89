"""Slowest first (stages/generate/schedule.py): the previous build's .ninja_log orders the generated CMake
lists; ties, quick steps and unknown files keep the manifest's order; KBUILD_SCHEDULE=off."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbuild.stages import generate
from kbuild.stages.generate import schedule
from kbuild_testing import cpu_kernel, make_probe_project, plan_of
from test_generate_cmake import read_back


def fake_log(build: Path, steps: dict[str, float]) -> None:
    """A .ninja_log (format 7) in which each output took the given seconds."""
    build.mkdir(parents=True, exist_ok=True)
    lines, t = ["# ninja log v7"], 0
    for output, seconds in steps.items():
        lines.append(f"{t}\t{t + int(seconds * 1000)}\t0\t{output}\tdeadbeef")
        t += 10
    (build / ".ninja_log").write_text("\n".join(lines) + "\n")


def obj(project: Path, rel: str, target: str = "kernel_k") -> str:
    return f"CMakeFiles/{target}.dir{project.resolve() / rel}.o"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.delenv(schedule.SCHEDULE_VAR, raising=False)
    files = {f"csrc/{n}.cpp": "" for n in ("a", "b", "c", "d", "e")}
    return make_probe_project(tmp_path / "proj", files=files, kernels={
        "k": cpu_kernel(["csrc/a.cpp", "csrc/b.cpp", "csrc/c.cpp", "csrc/d.cpp"]),
        "light": cpu_kernel(["csrc/e.cpp"])})


def lists(project: Path, tmp: Path) -> dict[str, list[str]]:
    got = read_back(generate.plan_cmake(plan_of(project)), tmp,
                    ["KB_KERNELS", "KB_KERNELS_LINK", "KB_KERNEL_k_SOURCES", "KB_KERNEL_light_SOURCES"])
    root = str(project.resolve()) + "/"
    return {k: [v.removeprefix(root) for v in vs] for k, vs in got.items()}


def build_dir(project: Path) -> Path:
    return generate.work_dir(plan_of(project)) / generate.BUILD_FOLDER


def test_without_a_previous_build_the_manifest_order_stays(project, tmp_path):
    got = lists(project, tmp_path)
    assert got["KB_KERNELS"] == got["KB_KERNELS_LINK"] == ["k", "light"]
    assert got["KB_KERNEL_k_SOURCES"] == ["csrc/a.cpp", "csrc/b.cpp", "csrc/c.cpp", "csrc/d.cpp"]


def test_the_slowest_of_the_last_build_start_first(project, tmp_path):
    fake_log(build_dir(project), {obj(project, "csrc/a.cpp"): 2.0, obj(project, "csrc/b.cpp"): 0.3,
                                  obj(project, "csrc/c.cpp"): 30.0, obj(project, "csrc/d.cpp"): 9.0,
                                  obj(project, "csrc/e.cpp", "kernel_light"): 60.0,
                                  "CMakeFiles/extension.dir/x.cpp.o": 500.0, "_probe.abi3.so": 1.0})
    got = lists(project, tmp_path)
    assert got["KB_KERNEL_k_SOURCES"] == ["csrc/c.cpp", "csrc/d.cpp", "csrc/a.cpp", "csrc/b.cpp"]
    assert got["KB_KERNELS"] == ["light", "k"]  # its one file took longest
    assert got["KB_KERNELS_LINK"] == ["k", "light"]  # the link's order never moves


def test_a_later_entry_of_the_same_output_wins_and_small_differences_do_not_reorder(project, tmp_path):
    build = build_dir(project)
    fake_log(build, {obj(project, "csrc/a.cpp"): 50.0, obj(project, "csrc/b.cpp"): 55.0})
    # within one 25 % step: the manifest's order decides (no reconfigure for noise)
    assert lists(project, tmp_path)["KB_KERNEL_k_SOURCES"][:2] == ["csrc/a.cpp", "csrc/b.cpp"]
    with (build / ".ninja_log").open("a") as f:  # a rebuild: a.cpp now quick
        f.write(f"100\t400\t0\t{obj(project, 'csrc/a.cpp')}\tfeed\n")
    assert lists(project, tmp_path)["KB_KERNEL_k_SOURCES"] == ["csrc/b.cpp", "csrc/a.cpp", "csrc/c.cpp",
                                                          "csrc/d.cpp"]


def test_schedule_off_keeps_the_manifest_order(project, tmp_path, monkeypatch):
    fake_log(build_dir(project), {obj(project, "csrc/d.cpp"): 90.0})
    monkeypatch.setenv(schedule.SCHEDULE_VAR, "off")
    assert lists(project, tmp_path)["KB_KERNEL_k_SOURCES"][0] == "csrc/a.cpp"
    monkeypatch.setenv(schedule.SCHEDULE_VAR, "on")
    assert lists(project, tmp_path)["KB_KERNEL_k_SOURCES"][0] == "csrc/d.cpp"


def test_slowest_first_is_stable_for_unknown_and_quick_files():
    files = [Path(f"/p/{n}") for n in "abcdef"]
    seconds = {Path("/p/e"): 4.0, Path("/p/b"): 0.5, Path("/p/f"): 4.1, Path("/p/c"): 0.9}
    assert [f.name for f in schedule.slowest_first(files, seconds)] == list("efabcd")
