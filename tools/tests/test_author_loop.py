"""The author's loop as kernels-community's authors run it: `kbuild dev` tests the build it just
made however the tests load the kernel (`get_kernel(repo, version=N)`, `import <module>`), and
`kbuild test` tests an existing build on a machine without compilers.

relu is kernels-community's project, unchanged (../shared/corpus, beside the checkout; these
tests skip without it). Its tests call `kernels.get_kernel("kernels-community/relu", version=1)`
at import: offline, without LOCAL_KERNELS, they fail at collection.
"""

from __future__ import annotations

from functools import partial
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from kbuild_testing import REPO, envs_folder, kbuild as run_kbuild, make_project, work_folder
from kbuild.stages import pipeline

pytestmark = pytest.mark.slow
CORPUS = REPO.parent / "shared" / "corpus" / "kernels-community-40d4194f-subset.tar.gz"
CPU_VARIANT = "torch213-cxx11-cpu-x86_64-linux"
CUDA_VARIANT = "torch214-cxx11-cu130-x86_64-linux"
needs_corpus = pytest.mark.skipif(not CORPUS.is_file(), reason=f"no kernels-community projects "
                                  f"at {CORPUS} (test input kept beside the checkout, not in it)")


def offline_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No Hub, an empty Hub cache, no LOCAL_KERNELS of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "KERNELS_"))}
    env.pop("LOCAL_KERNELS", None)
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf_home"), **extra)
    return env


kbuild = partial(run_kbuild, inherit=False, timeout=1200)  # each test passes its whole environment


@pytest.fixture(scope="module")
def relu(tmp_path_factory) -> Path:
    if not CORPUS.is_file():
        pytest.skip(f"no kernels-community projects at {CORPUS}")
    root = work_folder("author-loop-relu", tmp_path_factory.mktemp("relu"))
    with tarfile.open(CORPUS) as tar:
        tar.extractall(root, members=[m for m in tar.getmembers()
                                      if m.name == "relu" or m.name.startswith("relu/")],
                       filter="data")
    return root / "relu"


@pytest.fixture(scope="module")
def relu_dev(relu, tmp_path_factory):
    """`kbuild dev` of relu, offline: what an author runs after an edit."""
    env = offline_env(tmp_path_factory.mktemp("dev"))
    return kbuild("dev", env=env, cwd=relu)


@needs_corpus
def test_dev_passes_relus_own_tests_against_the_build_it_made_offline(relu, relu_dev):
    out = relu_dev.stdout + relu_dev.stderr
    assert relu_dev.returncode == 0, out[-4000:]
    assert f"tests load build/{CPU_VARIANT} " in out
    assert 'get_kernel("kernels-community/relu") through LOCAL_KERNELS' in out
    assert "2 passed" in relu_dev.stdout and "PytestUnknownMarkWarning" not in out
    assert (relu / "compile_commands.json").is_file()  # for clangd / VS Code


@needs_corpus
def test_kbuild_test_runs_relus_tests_on_a_copied_build_without_any_compiler(
        relu, relu_dev, tmp_path):
    """A GPU runner's job: the variants arrive as files, nothing compiles. PATH is an empty
    folder (no nvcc, cmake, ninja, c++, gcc): only the interpreter, named by its path, runs."""
    assert relu_dev.returncode == 0
    elsewhere = tmp_path / "artifacts" / "build"
    shutil.copytree(relu / "build", elsewhere)
    bare = tmp_path / "bin"
    bare.mkdir()
    path = str(bare)
    for tool in ("nvcc", "cmake", "ninja", "c++", "g++", "gcc", "cc", "clang"):
        assert shutil.which(tool, path=path) is None, tool
    env = offline_env(tmp_path, PATH=path)
    before = sorted(p.name for p in (relu / ".kbuild").iterdir())
    proc = subprocess.run([sys.executable, "-m", "kbuild", "test", str(relu), "--build-dir",
                           str(elsewhere), "--", "-m", "kernels_ci"],
                          env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert f"tests load {elsewhere / CPU_VARIANT} " in out and "2 passed" in proc.stdout
    assert "compiling" not in out and "configuring" not in out
    assert sorted(p.name for p in (relu / ".kbuild").iterdir()) == before

    # Nothing selected: pytest's exit 5, said in words.
    none = subprocess.run([sys.executable, "-m", "kbuild", "test", str(relu), "--build-dir",
                           str(elsewhere), "--", "-m", "not kernels_ci"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert none.returncode == 5 and "no tests collected (pytest exit 5)" in none.stderr

    # No variant for this torch: refused, listing what is there and why it does not load.
    (elsewhere / CPU_VARIANT).rename(elsewhere / "torch212-cxx11-cpu-x86_64-linux")
    wrong = subprocess.run([sys.executable, "-m", "kbuild", "test", str(relu),
                            "--build-dir", str(elsewhere)],
                           env=env, capture_output=True, text=True, timeout=600)
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr, wrong.stderr
    assert "no variant in" in wrong.stderr and "torch212-cxx11-cpu-x86_64-linux (Torch version " \
        "(2.12) does not match" in wrong.stderr


@needs_corpus
def test_dev_for_one_capability_in_a_matrix_environment(relu, tmp_path, cuda_python):
    """`kbuild dev --env torch214-cu130 --cuda-capabilities 9.0`: the CUDA variant, compiled
    for sm_90 alone, and its tests collected against it (no GPU here to run them)."""
    env = offline_env(tmp_path, KBUILD_ENVS_DIR=str(envs_folder()))
    proc = kbuild("dev", "--env", "torch214-cu130", "--cuda-capabilities", "9.0", "--backend",
                  "cuda", "--", "--collect-only", "-q", env=env, cwd=relu)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert f"{CUDA_VARIANT}: a local build for CUDA capabilities 9.0 only" in out
    assert f"tests load build/{CUDA_VARIANT} " in out
    assert "tests/test_relu.py: 2" in proc.stdout, proc.stdout[-2000:]  # collected: loaded
    ninja = (relu / ".kbuild" / CUDA_VARIANT / "cmake-build" / "build.ninja").read_text()
    codes = {part.split("]")[0] for part in ninja.split("code=[")[1:]}
    assert codes == {"sm_90"}, codes


# --- what the tests load: this build, and nothing else ---------------------------------------

TESTS = '''import os

import kernels


def test_get_kernel_gives_this_build():
    k = kernels.get_kernel("org/demo", version=1, trust_remote_code=True)
    assert k.MARK == os.environ["EXPECT_GET_KERNEL"]


def test_import_gives_this_build():
    import demo
    assert demo.MARK == os.environ["EXPECT_IMPORT"]
'''


def test_the_tests_load_this_build_not_the_hubs_copy_nor_an_installed_one(tmp_path):
    """The Hub (online, our server) holds version 1 marked "hub"; an installed `demo` package
    is marked "installed"; the local build is marked "local". Without kbuild the same tests see
    the other two (so they can fail); through `kbuild dev` they see the local build alone."""
    from kbuild.publish import upload as publish
    from kbuild_hub.server import HubServer

    project = make_project(tmp_path / "demo", "[torch-noarch]\n", backends='["cpu"]')
    (project / "build.toml").write_text((project / "build.toml").read_text().replace(
        "[torch-noarch]", '[general.hub]\nrepo-id = "org/demo"\n\n[torch-noarch]'))
    init = project / "torch-ext" / "demo" / "__init__.py"
    (project / "tests").mkdir()
    (project / "tests" / "test_loads.py").write_text(TESTS)
    installed = tmp_path / "site"
    (installed / "demo").mkdir(parents=True)
    (installed / "demo" / "__init__.py").write_text('MARK = "installed"\n')
    with HubServer(token="hf_loop_test") as hub:
        init.write_text('MARK = "hub"\n')
        pipeline.build(project)
        publish.upload(project, publish.UploadOptions(endpoint=hub.url, token="hf_loop_test",
                                                      load=False, allow_dirty=True),
                       log=lambda _: None, warn=lambda _: None)
        init.write_text('MARK = "local"\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "KERNELS_"))}
        env.pop("LOCAL_KERNELS", None)
        env.update(HF_ENDPOINT=hub.url, HF_TOKEN="hf_loop_test", HF_HOME=str(tmp_path / "hf"),
                   PYTHONPATH=str(installed))

        control = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
             "--rootdir", str(project), str(project / "tests")],
            env={**env, "EXPECT_GET_KERNEL": "hub", "EXPECT_IMPORT": "installed"}, cwd=project,
            capture_output=True, text=True, timeout=300)
        assert control.returncode == 0, control.stdout[-3000:]

        proc = kbuild("dev", env={**env, "EXPECT_GET_KERNEL": "local", "EXPECT_IMPORT": "local",
                                  "LOCAL_KERNELS": f"other/kernel={tmp_path}"}, cwd=project)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        assert "2 passed" in proc.stdout
        assert "tests load build/torch-cpu (" in proc.stderr
