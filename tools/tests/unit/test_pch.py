"""The binding's precompiled torch header (stages/compile/pch.py): which bindings take it, which part of
the compile line keys it, and, with the real GCC over a small stand-in for torch's include tree,
that it is made, used, re-made when a header changes and refused where the project would shadow
one of torch's headers — the object compiled with it is the same bytes as without."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from kbuild.stages.compile import pch

BINDING = """// the binding
#include <torch/library.h>
#include "registration.h"

int twice(int x) { return TORCH_TWICE(x); }
"""


@pytest.mark.parametrize("text", [
    BINDING,
    "/* licence\n   text */\n#pragma once\n#include <ATen/Parallel.h>\n#include <torch/library.h>\n",
    "#include <torch/all.h>\n#include \"registration.h\"\n",
])
def test_a_binding_that_starts_with_torch_takes_the_header(tmp_path, text):
    (tmp_path / "b.cpp").write_text(text)
    assert pch.source_reason(tmp_path / "b.cpp") is None


@pytest.mark.parametrize("text, reason", [
    ("#define TORCH_ASSERT_ONLY_METHOD_OPERATORS\n#include <torch/library.h>\n",
     "does not start with a torch #include"),
    ("#if defined(CUDA_KERNEL)\n#include <torch/csrc/stable/library.h>\n#endif\n",
     "does not start with a torch #include"),
    ('#include "my_torch.h"\n#include <torch/library.h>\n', "does not start with a torch #include"),
    ("#include <ATen/Tensor.h>\n", "does not include <torch/library.h>"),
    ("int x;\n#include <torch/library.h>\n", "has code before its first #include"),
])
def test_a_binding_that_does_not_is_left_alone(tmp_path, text, reason):
    (tmp_path / "b.cpp").write_text(text)
    assert reason in pch.source_reason(tmp_path / "b.cpp")


def fake_plan(project: Path, **kw) -> SimpleNamespace:
    return SimpleNamespace(project=project, stable_abi=kw.get("stable_abi"),
                           manifest=SimpleNamespace(torch=SimpleNamespace(src=["b.cpp", "b.h"])))


def test_what_turns_it_off(tmp_path, monkeypatch):
    (tmp_path / "b.cpp").write_text(BINDING)
    plan = fake_plan(tmp_path)
    gxx = shutil.which("g++")
    assert pch.off_reason(plan, gxx, None) is None
    assert pch.off_reason(plan, gxx, "/usr/bin/ccache") is None
    assert "sccache" in pch.off_reason(plan, gxx, "/x/sccache")
    assert pch.off_reason(fake_plan(tmp_path, stable_abi=(2, 10)), gxx, None) == "stable-ABI binding"
    monkeypatch.setenv(pch.PCH_VAR, "off")
    assert pch.off_reason(plan, gxx, None) == f"{pch.PCH_VAR}=off"


def compile_line(project: Path, build: Path, torch: Path) -> list[str]:
    return ["/usr/bin/c++", "-DCPU_KERNEL", f"-DTORCH_EXTENSION_NAME=_x_{project.name}",
            f"-I{build.parent}", f"-I{project}/csrc", "-isystem", str(torch), "-O2",
            "-std=gnu++20", "-fPIC", f"-ffile-prefix-map={project}/=",
            f"-ffile-prefix-map={build}/=", "-ffile-prefix-map=../../=",
            f"-ffile-prefix-map={torch.parent}/=", "-include", f"{build.parent}/{pch.HEADER}",
            "-Winvalid-pch", "-fpch-preprocess", "-o", "CMakeFiles/b.o", "-c", f"{project}/b.cpp"]


def test_the_key_leaves_out_the_project(tmp_path):
    torch = tmp_path / "env" / "include"
    lines = [pch.header_flags(["/x/ccache", *compile_line(tmp_path / p, tmp_path / p / "w/b", torch)],
                              "/x/ccache", [str(tmp_path / p), str(tmp_path / p / "w/b")])
             for p in ("one", "two")]
    (flags, includes), (other, _) = lines
    assert flags == other and pch.key_of(flags) == pch.key_of(other)
    assert flags == ["/usr/bin/c++", "-DCPU_KERNEL", "-isystem", str(torch), "-O2", "-std=gnu++20",
                     "-fPIC", f"-ffile-prefix-map={torch.parent}/="]
    assert includes == [str(tmp_path / "one/w"), str(tmp_path / "one/csrc")]
    assert pch.key_of(flags) != pch.key_of([*flags, "-DNDEBUG"])


def test_a_depfile_is_read_with_escaped_spaces(tmp_path):
    (tmp_path / "d").write_text("x.gch: /a/b.h \\\n /c/with\\ space.h\\\n /d/e.h\n")
    assert pch.read_depfile(tmp_path / "d") == ["/a/b.h", "/c/with space.h", "/d/e.h"]


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """A project whose binding includes a stand-in <torch/library.h>, CMake's compile line for
    it, and a private cache."""
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(pch.PCH_VAR, raising=False)
    torch = tmp_path / "env" / "include"
    (torch / "torch").mkdir(parents=True)
    (torch / "torch" / "library.h").write_text(
        "#pragma once\n#include <vector>\n#include <string>\n#include <map>\n"
        "#define TORCH_TWICE(x) ((x) * 2)\ninline const char* where() { return __FILE__; }\n")
    project = tmp_path / "proj"
    work = project / ".kbuild" / "variant"
    build = work / "cmake-build"
    build.mkdir(parents=True)
    (project / "csrc").mkdir()
    (project / "b.cpp").write_text(BINDING + "const char* w() { return where(); }\n")
    (work / "registration.h").write_text("#pragma once\n")
    (work / pch.HEADER).write_text(pch.header_text())
    argv = compile_line(project, build, torch)
    (build / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(build), "command": shlex.join(argv), "file": str(project / "b.cpp"),
          "output": "CMakeFiles/b.o"}]))
    (build / "CMakeFiles").mkdir()
    return SimpleNamespace(plan=fake_plan(project), work=work, build=build, torch=torch,
                           argv=argv, project=project)


def prepare(s):
    return pch.prepare(s.plan, s.work, s.build, None, shutil.which("ninja") or "ninja")


def compile_binding(s) -> tuple[bytes, str]:
    proc = subprocess.run(s.argv, cwd=s.build, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return (s.build / "CMakeFiles" / "b.o").read_bytes(), proc.stderr


def test_made_once_then_used_with_the_same_bytes(setup):
    s = setup
    text, _ = compile_binding(s)
    outcome, maker = prepare(s)
    assert outcome is None and maker is not None
    assert str(maker.finish()).startswith("precompiled torch header: made for the next builds")
    outcome, maker = prepare(s)
    assert maker is None and outcome.state == "used"
    link = s.work / f"{pch.HEADER}.gch"
    assert link.is_symlink() and link.resolve().parent.parent == pch.store()
    with_pch, warnings = compile_binding(s)
    assert "pch" not in warnings  # -Winvalid-pch: GCC took it
    assert with_pch == text
    shown = subprocess.run([*s.argv[:-2], "-H", "-fsyntax-only", s.argv[-1]], cwd=s.build,
                           capture_output=True, text=True).stderr
    assert f"! {link}" in shown  # GCC's mark for a precompiled header it used
    record = json.loads((link.resolve().parent / "stamps.json").read_text())
    assert record["sha256"] == hashlib.sha256(link.resolve().read_bytes()).hexdigest()
    assert (s.work / pch.SUM).resolve().read_text() == pch.made_from(record["files"]) + "\n"
    assert str(s.torch / "torch" / "library.h") in {f[0] for f in record["files"]}


def ccache_compile(ccache: str, argv: list[str], cwd: Path, env: dict[str, str]) -> dict[str, int]:
    """Compiles `argv` through the real ccache; its counters afterwards."""
    proc = subprocess.run([ccache, *argv], cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    stats = subprocess.run([ccache, "--print-stats"], env=env, capture_output=True, text=True).stdout
    return {k: int(v) for k, v in (line.split("\t") for line in stats.splitlines() if "\t" in line)}


def test_ccache_keys_a_hit_on_the_checksum_file_not_the_header(setup, tmp_path):
    """ccache reads the entry's checksum file in place of the header: a hit, and a miss once that
    file says the header is another one (it does not re-read the ~250 MB header per hit)."""
    from kbuild.stages.compile import cache_env, cache_tool
    ccache = cache_tool("ccache")
    if not ccache:
        pytest.skip("no ccache")
    s = setup
    prepare(s)[1].finish()
    assert prepare(s)[0].state == "used"
    env = {**cache_env(ccache, s.project, precompiled_header=True), "CCACHE_DIR": str(tmp_path / "cc")}

    def compile_counts() -> tuple[int, int]:
        counts = ccache_compile(ccache, s.argv, s.build, env)
        return counts["direct_cache_hit"], counts["cache_miss"]

    assert compile_counts() == (0, 1)
    assert compile_counts() == (1, 1)
    checksum = (s.work / pch.SUM).resolve()
    checksum.write_text("0" * 64 + "\n")
    assert compile_counts() == (1, 2)


def test_ccache_stores_the_binding_while_torchs_headers_gain_a_hard_link(setup, tmp_path):
    """uv installs torch by hard links: another environment made from the same uv cache while the
    binding compiles changes the status time (ctime) of torch's headers. ccache still stores that
    compile, so the next one is a hit; a header whose content changed still misses."""
    from kbuild.stages.compile import cache_env, cache_tool
    ccache = cache_tool("ccache")
    if not ccache:
        pytest.skip("no ccache")
    s = setup
    header = s.torch / "torch" / "ops.h"  # one of torch's headers the precompiled one leaves out
    header.write_text("#pragma once\n#include <torch/library.h>\ninline int four() { return 4; }\n")
    binding = s.project / "b.cpp"
    binding.write_text(binding.read_text() + "#include <torch/ops.h>\nint f() { return four(); }\n")
    prepare(s)[1].finish()
    assert prepare(s)[0].state == "used"
    # Links torch's header into another environment 0.2 s into each compile (ccache looks for
    # changes from 0.1 s after it started), then compiles.
    compiler = tmp_path / "bin" / "c++"
    compiler.parent.mkdir()
    compiler.write_text(f'#!/bin/sh\nsleep 0.2\nln -f "{header}" "{tmp_path}/other-env.$$"\n'
                        f'exec {s.argv[0]} "$@"\n')
    compiler.chmod(0o755)
    argv = [str(compiler), *s.argv[1:], "-MD", "-MF", "CMakeFiles/b.o.d"]
    env = {**cache_env(ccache, s.project, precompiled_header=True), "CCACHE_DIR": str(tmp_path / "cc")}

    def compile_counts() -> tuple[int, int]:
        counts = ccache_compile(ccache, argv, s.build, env)
        return counts["direct_cache_hit"] + counts["preprocessed_cache_hit"], counts["cache_miss"]

    assert compile_counts() == (0, 1)
    assert compile_counts() == (1, 1)
    header.write_text(header.read_text().replace("4;", "2 + 2;"))  # its content changed: a miss
    assert compile_counts() == (1, 2)


def test_a_changed_header_makes_it_again(setup):
    s = setup
    prepare(s)[1].finish()
    header = s.torch / "torch" / "library.h"
    os.utime(header, ns=(1, 1))  # touched, same content: still valid
    assert prepare(s)[0].state == "used"
    header.write_text(header.read_text() + "#define MORE 1\n")
    outcome, maker = prepare(s)
    assert outcome is None and maker is not None  # stale: removed, made again
    assert not (s.work / f"{pch.HEADER}.gch").exists()
    maker.finish()
    assert prepare(s)[0].state == "used"


def test_a_project_header_of_the_same_name_keeps_it_off(setup):
    s = setup
    prepare(s)[1].finish()
    (s.project / "csrc" / "torch").mkdir()
    (s.project / "csrc" / "torch" / "library.h").write_text("#pragma once\n")
    outcome, maker = prepare(s)
    assert maker is None and outcome.state == "off"
    assert "csrc/torch/library.h would be read instead of torch's torch/library.h" in outcome.detail
    assert not (s.work / f"{pch.HEADER}.gch").exists()


def test_a_store_others_can_write_is_not_used(setup):
    s = setup
    prepare(s)[1].finish()
    store = pch.store()
    store.chmod(0o777)
    outcome, maker = prepare(s)
    assert maker is None and outcome.state == "off" and "other users can write it" in outcome.detail
    assert not (s.work / f"{pch.HEADER}.gch").exists()


def test_a_failed_make_is_reported_and_leaves_nothing(setup):
    s = setup
    (s.torch / "torch" / "library.h").write_text("#error broken\n")
    outcome, maker = prepare(s)
    result = maker.finish()
    assert result.state == "failed" and "pch-make.log" in result.detail
    assert "#error broken" in (s.work / "pch-make.log").read_text()
    assert [p.name for p in pch.store().iterdir()] == []


def test_a_binding_from_the_compiler_cache_does_not_wait(setup):
    s = setup
    _, maker = prepare(s)
    outcome = maker.settle([("CMakeFiles/b.o", 0.2)])
    assert outcome.state == "off" and "compiler cache" in outcome.detail
    assert [p.name for p in pch.store().iterdir()] == []


def test_entries_abandoned_by_a_dead_build_are_removed(setup):
    """A `<key>.tmp<pid>` folder whose process is gone (a build killed before it could clean up)
    is removed when the next header is made; one still being written is left alone."""
    s = setup
    root = pch.store()
    gone = subprocess.Popen(["true"])
    gone.wait()
    abandoned, live = root / f"k.tmp{gone.pid}", root / f"k.tmp{os.getpid()}"
    for folder in (abandoned, live):
        folder.mkdir()
        (folder / f"{pch.HEADER}.gch").write_bytes(b"half")
    prepare(s)[1].finish()
    assert not abandoned.exists() and live.exists()


@pytest.mark.parametrize("where", ["starting", "finishing"])
def test_a_signal_while_the_header_starts_or_finishes_leaves_nothing(setup, monkeypatch, where):
    """Ctrl-C or SIGTERM (raised as KeyboardInterrupt) can land anywhere: just after the header's
    compiler started, or while its checksum is computed. Either way the compiler is stopped and
    the store holds no half-made entry."""
    s = setup
    started = []
    real_spawn = pch.spawn_logged

    def spawn(*args, **kw):
        started.append(real_spawn(*args, **kw))
        return started[-1]

    def interrupted(*_args, **_kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(pch, "spawn_logged", spawn)
    if where == "starting":
        monkeypatch.setattr(pch, "_system_includes", interrupted)
        with pytest.raises(KeyboardInterrupt):
            prepare(s)
    else:
        maker = prepare(s)[1]
        monkeypatch.setattr(pch, "_sha256", interrupted)
        with pytest.raises(KeyboardInterrupt):
            maker.finish()
    assert started and started[0].poll() is not None
    assert list(pch.store().iterdir()) == []


def test_a_header_that_is_not_the_one_made_is_not_used(setup):
    """A `.gch` replaced behind the sum ccache keys on (the sum unchanged) would give the binding
    a wrong object under a right key: it is checked against the sha256 it was made with, and
    made again."""
    s = setup
    prepare(s)[1].finish()
    (entry,) = pch.store().iterdir()
    header = entry / f"{pch.HEADER}.gch"
    made = header.stat()
    data = header.read_bytes()
    other = header.with_name("other.gch")
    other.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    os.utime(other, ns=(made.st_atime_ns, made.st_mtime_ns))  # even with its mtime and size
    other.replace(header)
    outcome, maker = prepare(s)
    assert outcome is None and maker is not None  # not used: made again
    assert not (s.work / f"{pch.HEADER}.gch").exists()
    maker.finish()
    assert prepare(s)[0].state == "used"
    assert hashlib.sha256(header.read_bytes()).hexdigest() == json.loads(
        (entry / "stamps.json").read_text())["sha256"]


def test_the_sum_is_what_the_header_was_made_from_not_its_bytes(setup, tmp_path, monkeypatch):
    """GCC's header holds the folder it was made in and values of the process that made it:
    made again (another process, another cache folder) it has other bytes, but its sum, and the
    binding's compiler-cache key with it, stays; another torch header changes it."""
    s = setup
    made = []
    for cache in ("cache", "another cache", "third"):
        monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path / cache))
        if cache == "third":
            library = s.torch / "torch" / "library.h"
            library.write_text(library.read_text() + "#define TORCH_THIRD 3\n")
        prepare(s)[1].finish()
        (entry,) = pch.store().iterdir()
        made.append(((entry / pch.SUM).read_text(), (entry / f"{pch.HEADER}.gch").read_bytes()))
    (first, first_bytes), (second, second_bytes), (third, _) = made
    assert first_bytes != second_bytes and first == second and third != first


def test_a_cache_that_cannot_be_written_leaves_the_header_off(setup, tmp_path, monkeypatch, capsys):
    s = setup
    blocked = tmp_path / "a file"
    blocked.write_text("")
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(blocked))
    outcome, maker = prepare(s)
    assert maker is None and outcome.state == "off"
    assert f"the precompiled-header cache cannot be used: {blocked / 'pch'}" in outcome.detail
    assert (f"warning: the precompiled-header cache cannot be used: {blocked / 'pch'}"
            in capsys.readouterr().err)
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(tmp_path / "cache"))
    maker = prepare(s)[1]
    real_write = Path.write_text

    def full_disk(path, *args, **kw):
        if path.name == pch.SUM:
            raise OSError(28, "No space left on device")
        return real_write(path, *args, **kw)
    monkeypatch.setattr(Path, "write_text", full_disk)
    outcome = maker.finish()
    assert outcome.state == "failed" and "No space left on device" in outcome.detail
    assert list(pch.store().iterdir()) == []
