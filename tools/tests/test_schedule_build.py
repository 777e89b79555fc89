"""Slowest first, for real: with a previous build's .ninja_log naming the last source of a kernel
as the slowest, the generated build.ninja compiles it first, and the variant is byte-identical
to one built in the manifest's order (KBUILD_SCHEDULE=off)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kbuild.stages import generate, pipeline
from kbuild.stages.generate import schedule
from kbuild_testing import cpu_kernel, make_probe_project

SOURCES = [f"csrc/part{i}.cpp" for i in range(4)]


def project_at(root: Path) -> Path:
    files = {s: f"extern \"C\" int part{i}(int x) {{ return x * {i + 2} + {i}; }}\n"
             for i, s in enumerate(SOURCES)}
    files["csrc/other.cpp"] = "extern \"C\" int other(int x) { return -x; }\n"
    return make_probe_project(root, files=files, kernels={
        "first": cpu_kernel(["csrc/other.cpp"]), "parts": cpu_kernel(SOURCES)})


def build(project: Path, schedule_on: bool):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KBUILD_COMPILER_CACHE", "none")
        mp.setenv(schedule.SCHEDULE_VAR, "on" if schedule_on else "off")
        (result,) = pipeline.build(project, backends=["cpu"], verify=False)
    return result


def compile_order(build_ninja: Path) -> list[str]:
    """The objects of the kernel sources, in the order build.ninja lists their compiles."""
    return re.findall(r"^build CMakeFiles/kernel_\w+\.dir/\S*/(csrc/\w+\.cpp)\.o:",
                      build_ninja.read_text(), re.M)


def test_the_slowest_unit_of_the_last_build_is_compiled_first_and_the_binary_is_unchanged(tmp_path):
    plain = build(project_at(tmp_path / "a" / "probe"), schedule_on=False)
    work_a = plain.path.parent.parent / ".kbuild" / plain.variant / generate.BUILD_FOLDER
    assert compile_order(work_a / "build.ninja") == ["csrc/other.cpp", *SOURCES]

    project = project_at(tmp_path / "b" / "probe")
    # the previous build of this variant: part3 took 90 s, part1 20 s
    work_b = project / ".kbuild" / plain.variant / generate.BUILD_FOLDER
    work_b.mkdir(parents=True)
    slow = {"csrc/part3.cpp": 90_000, "csrc/part1.cpp": 20_000}
    (work_b / ".ninja_log").write_text("# ninja log v7\n" + "".join(
        f"0\t{ms}\t0\tCMakeFiles/kernel_parts.dir{project.resolve() / src}.o\t0\n"
        for src, ms in slow.items()))
    scheduled = build(project, schedule_on=True)
    assert compile_order(work_b / "build.ninja") == [
        "csrc/part3.cpp", "csrc/part1.cpp", "csrc/part0.cpp", "csrc/part2.cpp", "csrc/other.cpp"]
    so = f"{plain.kernel_id}.abi3.so"
    assert scheduled.kernel_id == plain.kernel_id
    assert (scheduled.path / so).read_bytes() == (plain.path / so).read_bytes()
