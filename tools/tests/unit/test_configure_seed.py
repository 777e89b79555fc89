"""CMake configure seeds (stages/compile/configure_seed.py), with the real CMake, GCC and (where
installed) nvcc: a new folder configured from a seed skips compiler identification and gets the
compile lines and rules of one configured from scratch; a seed of other tools, flags or
environment is not used; an unsafe or broken one is not trusted."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from kbuild.stages import compile as compile_mod
from kbuild.stages.compile import configure_seed
from kbuild.stages.toolchain import find_cxx

NVCC = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)), None)
LANGS = ["cxx"] + (["cuda"] if NVCC else [])


@pytest.fixture(autouse=True)
def user_cache(tmp_path, monkeypatch):
    cache = tmp_path / "user-cache"
    cache.mkdir(mode=0o755)
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(cache))
    monkeypatch.delenv(configure_seed.SEED_VAR, raising=False)
    return cache


def project(root: Path, lang: str) -> Path:
    src = root / "src"
    src.mkdir(parents=True)
    (src / "a.cpp").write_text("int a() { return 1; }\n")
    body = "cmake_minimum_required(VERSION 3.26)\nproject(seeded LANGUAGES CXX)\n"
    sources = "a.cpp"
    if lang == "cuda":
        (src / "k.cu").write_text("__global__ void k(int *x) { *x = 1; }\n")
        body += "enable_language(CUDA)\n"
        sources += " k.cu"
    (src / "CMakeLists.txt").write_text(body + f"add_library(m MODULE {sources})\n"
                                        "set(CMAKE_EXPORT_COMPILE_COMMANDS ON)\n")
    return src


def args_for(src: Path, build: Path, lang: str) -> list[str]:
    args = [compile_mod._tool("cmake"), "-S", str(src), "-B", str(build), "-G", "Ninja",
            f"-DCMAKE_MAKE_PROGRAM={compile_mod._tool('ninja')}", "-DCMAKE_BUILD_TYPE=Release",
            f"-DCMAKE_CXX_COMPILER={find_cxx()}", "-DCMAKE_CXX_COMPILER_FORCED=ON",
            "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"]
    if lang == "cuda":
        args += [f"-DCMAKE_CUDA_COMPILER={NVCC}", f"-DCMAKE_CUDA_HOST_COMPILER={find_cxx()}",
                 "-DCMAKE_CUDA_COMPILER_FORCED=ON", "-DCMAKE_CUDA_ARCHITECTURES=90-real"]
    return args


def configure(root: Path, lang: str) -> tuple[Path, Path, str]:
    src = project(root, lang)
    build = src / "cmake-build"
    log = root / "build.log"
    log.write_text("")
    compile_mod.configure(args_for(src, build, lang), src, build, log, dict(os.environ))
    return src, build, log.read_text()


def outputs(src: Path, build: Path) -> dict[str, str]:
    """What Ninja runs: the compile lines and the rules, with the folders named alike."""
    def same(text: str) -> str:
        return text.replace(str(build), "<build>").replace(str(src), "<src>")
    commands = json.loads((build / "compile_commands.json").read_text())
    rules = "".join(ln for ln in (build / "CMakeFiles" / "rules.ninja").read_text().splitlines(True)
                    if not ln.startswith("#"))
    return {"commands": same(json.dumps([e["command"] for e in commands])), "rules": same(rules)}


def seeds(cache: Path) -> list[Path]:
    root = cache / "cmake"
    return sorted(p for p in root.iterdir()) if root.is_dir() else []


@pytest.mark.parametrize("lang", LANGS)
def test_a_new_folder_configures_from_the_seed_as_from_scratch(tmp_path, user_cache, lang):
    first_src, first_build, first_log = configure(tmp_path / "first", lang)
    assert "compiler checks: from" not in first_log
    assert list((first_build / "CMakeFiles").glob("*/CompilerIdCXX"))
    (seed,) = seeds(user_cache)
    assert not any(str(tmp_path) in p.read_text() for p in seed.rglob("*") if p.is_file())

    src, build, log = configure(tmp_path / "second", lang)
    assert f"compiler checks: from $KBUILD_CACHE_DIR/cmake/{seed.name}" in log
    assert not list((build / "CMakeFiles").glob("*/CompilerId*")), "the compilers were identified again"
    assert outputs(src, build) == outputs(first_src, first_build)
    assert seeds(user_cache) == [seed]


@pytest.mark.parametrize("change", ["flags", "compiler", "arguments"])
def test_other_tools_flags_or_arguments_are_another_seed(tmp_path, monkeypatch, change):
    src = project(tmp_path, "cxx")
    build = src / "cmake-build"
    args = args_for(src, build, "cxx")
    key = configure_seed.key_of(args, src, build)
    assert configure_seed.key_of(args_for(tmp_path / "x", tmp_path / "x" / "b", "cxx"),
                                 tmp_path / "x", tmp_path / "x" / "b") == key  # folders don't count
    if change == "flags":
        monkeypatch.setenv("CXXFLAGS", "-O0")
    elif change == "compiler":
        cxx = tmp_path / "g++"
        shutil.copy2(os.path.realpath(find_cxx()), cxx)
        args = [a if not a.startswith("-DCMAKE_CXX_COMPILER=") else f"-DCMAKE_CXX_COMPILER={cxx}"
                for a in args]
        key = configure_seed.key_of(args, src, build)
        os.utime(cxx, ns=(1, 1))  # the same path, another file
    else:
        args = [*args, "-DCMAKE_BUILD_TYPE=Debug"]
    assert configure_seed.key_of(args, src, build) != key


def test_an_unsafe_seed_is_not_used(tmp_path, user_cache):
    configure(tmp_path / "first", "cxx")
    (seed,) = seeds(user_cache)
    seed.chmod(0o775)  # others in the group could change what CMake would read
    _, build, log = configure(tmp_path / "second", "cxx")
    assert "compiler checks: from" not in log
    assert list((build / "CMakeFiles").glob("*/CompilerIdCXX"))


def test_a_broken_seed_configures_from_an_empty_folder(tmp_path, user_cache):
    configure(tmp_path / "first", "cxx")
    (seed,) = seeds(user_cache)
    (system,) = seed.glob("CMakeFiles/*/CMakeSystem.cmake")
    system.write_text('message(FATAL_ERROR "broken")\n')
    src, build, log = configure(tmp_path / "second", "cxx")
    assert "compiler checks: from" in log and "again from an empty folder" in log
    assert (build / "build.ninja").is_file()
    # The broken seed was replaced by that configure's: the next folder configures once.
    _, build, log = configure(tmp_path / "third", "cxx")
    assert "compiler checks: from" in log and "again from an empty folder" not in log
    assert not list((build / "CMakeFiles").glob("*/CompilerId*"))
    assert [p.name for p in seeds(user_cache)] == [seed.name]


def test_a_cache_that_cannot_be_written_is_warned_about_and_skipped(tmp_path, monkeypatch, capsys):
    """A file where the cache should be (as a read-only or foreign folder would be): one warning
    naming the folder, and the configure goes on without a seed."""
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(blocked))
    _, build, log = configure(tmp_path / "first", "cxx")
    assert (build / "build.ninja").is_file() and "compiler checks: from" not in log
    warned = capsys.readouterr().err
    assert f"the CMake configure cache cannot be used: {blocked / 'cmake'}" in warned, warned
    assert "going on without it" in warned


def test_a_full_disk_leaves_no_half_written_seed(tmp_path, user_cache, monkeypatch, capsys):
    written = []
    real_write = Path.write_text

    def full_disk(path, text, *args, **kw):  # the seed's second file does not fit
        if user_cache in path.parents:
            if written:
                raise OSError(28, "No space left on device")
            written.append(path)
        return real_write(path, text, *args, **kw)
    monkeypatch.setattr(Path, "write_text", full_disk)
    _, build, _ = configure(tmp_path / "first", "cxx")
    assert (build / "build.ninja").is_file() and written
    assert seeds(user_cache) == []  # neither a seed nor a half-written folder
    assert "No space left on device" in capsys.readouterr().err
    monkeypatch.undo()
    monkeypatch.setenv("KBUILD_CACHE_DIR", str(user_cache))
    configure(tmp_path / "second", "cxx")
    assert len(seeds(user_cache)) == 1


def test_off_neither_keeps_nor_uses_one(tmp_path, user_cache, monkeypatch):
    monkeypatch.setenv(configure_seed.SEED_VAR, "off")
    configure(tmp_path / "first", "cxx")
    assert seeds(user_cache) == []
