"""Stage 3: the build environment — the target interpreter's torch, and the compilers."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path

from packaging.version import Version

from ..core.errors import BuildError


@dataclass(frozen=True)
class TorchEnv:
    python: str
    python_version: str
    python_include: str
    torch_version: str
    torch_root: str
    cuda: str | None
    hip: str | None
    cxx11_abi: bool
    cxx_std: int
    machine: str
    system: str
    site_packages: str

    @property
    def torch_release(self) -> Version:
        return Version(Version(self.torch_version).base_version)

    @property
    def torch_tag(self) -> str:
        return f"torch{self.torch_release.major}{self.torch_release.minor}"

    @property
    def include_dirs(self) -> list[str]:
        inc = Path(self.torch_root) / "include"
        return [str(inc), str(inc / "torch" / "csrc" / "api" / "include")]

    @property
    def lib_dir(self) -> str:
        return str(Path(self.torch_root) / "lib")


def _cache_key(python: str) -> str | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print(sys.prefix)"], capture_output=True,
                             text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    versions = list(Path(out).glob("lib/python*/site-packages/torch/version.py"))
    if not versions:
        return None
    st = versions[0].stat()
    return f"{Path(python).absolute()}|{versions[0]}|{st.st_mtime_ns}|{st.st_size}"


def read_torch_env(python: str | None = None, *, cache_dir: Path | None = None) -> TorchEnv:
    """Inspects torch in `python` (default: this interpreter), cached by torch's install stamp."""
    python = python or sys.executable
    if not shutil.which(python) and not Path(python).is_file():
        raise BuildError(f"Python interpreter {python!r} not found",
                         hint="pass an existing interpreter with --python")
    cache_file = cache_dir / "torchenv.json" if cache_dir else None
    key = _cache_key(python) if cache_file else None
    cache: dict = {}
    if cache_file and cache_file.is_file():
        try:
            cache = json.loads(cache_file.read_text())
        except ValueError:
            cache = {}
        if key and key in cache:
            return TorchEnv(**cache[key])
    script = resources.files("kbuild") / "resources" / "scripts" / "inspect_torch.py"
    proc = subprocess.run([python, str(script)], capture_output=True, text=True)
    try:
        info = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise BuildError(f"could not inspect torch with {python}: {proc.stderr.strip()[-400:]}",
                         hint="check that the interpreter runs") from None
    if "error" in info:
        raise BuildError(f"{python}: {info['error']}",
                         hint="install torch in this environment (e.g. pip install torch==2.13.0), "
                              "or pass another interpreter with --python")
    env = TorchEnv(**info)
    if cache_file and key:
        cache[key] = asdict(env)
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache, indent=1))
        os.replace(tmp, cache_file)
    return env


@dataclass(frozen=True)
class CudaToolkit:
    nvcc: Path
    version: Version
    root: Path

    @cached_property
    def supported_archs(self) -> list[str]:
        """Real architectures nvcc can target, as capabilities like "9.0"."""
        out = subprocess.run([str(self.nvcc), "--list-gpu-arch"], capture_output=True,
                             text=True).stdout
        caps = []
        for m in re.finditer(r"compute_(\d+)([af]?)", out):
            num = m.group(1)
            caps.append(f"{num[:-1]}.{num[-1]}{m.group(2)}")
        return caps

    @cached_property
    def cudart(self) -> str:
        """The shared CUDA runtime to link (torch loads the same soname at run time)."""
        for pattern in ("lib64/libcudart.so", "lib/libcudart.so", "targets/*/lib/libcudart.so",
                        "lib64/libcudart.so.*", "lib/libcudart.so.*", "targets/*/lib/libcudart.so.*"):
            found = sorted(self.root.glob(pattern))
            if found:
                return str(found[0])
        raise BuildError(f"no libcudart.so in the CUDA toolkit at {self.root}",
                         hint="install the CUDA runtime development files (cudart) of this toolkit")

    @cached_property
    def include_dirs(self) -> list[str]:
        """The toolkit's own include dirs, as nvcc itself reports them."""
        return _nvcc_layout(self.nvcc)[1]


def _nvcc_layout(nvcc: Path) -> tuple[Path, list[str]]:
    """(toolkit root, include dirs) from `nvcc --dryrun`; works through wrapper scripts."""
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.cu"
        probe.write_text("")
        out = subprocess.run([str(nvcc), "--dryrun", "-c", str(probe), "-o", str(probe) + ".o"],
                             capture_output=True, text=True, cwd=tmp)
    text = out.stdout + out.stderr
    top = re.search(r"TOP=(\S+)", text)
    root = Path(top.group(1)).resolve() if top else nvcc.resolve().parent.parent
    includes = []
    for m in re.finditer(r'(?:INCLUDES|SYSTEM_INCLUDES)="([^"]*)"\s*(?:"([^"]*)")?', text):
        for chunk in m.groups():
            for part in (chunk or "").split():
                part = part.removeprefix("-I").strip('"')
                if part and part != "-isystem" and Path(part).is_dir():
                    includes.append(str(Path(part).resolve()))
    return root, list(dict.fromkeys(includes)) or [str(root / "include")]


def _nvcc_candidates(env: TorchEnv) -> list[Path]:
    found: list[Path] = []
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        if os.environ.get(var):
            found.append(Path(os.environ[var]).absolute() / "bin" / "nvcc")
    # NVIDIA's toolkit wheels inside the target environment (PyPI-realised environments).
    site = Path(env.site_packages) / "nvidia"
    found += sorted(site.glob("cu*/bin/nvcc")) + sorted(site.glob("cuda_nvcc/bin/nvcc"))
    if shutil.which("nvcc"):
        found.append(Path(shutil.which("nvcc")))
    found.append(Path("/usr/local/cuda/bin/nvcc"))
    return found


def find_cuda(env: TorchEnv) -> CudaToolkit:
    """Finds an nvcc whose major.minor matches torch's CUDA runtime."""
    if not env.cuda:
        raise BuildError(f"torch {env.torch_version} in {env.python} is not a CUDA build",
                         hint="use an environment with a CUDA torch, or build --backend cpu")
    want = Version(env.cuda)
    seen = []
    for nvcc in _nvcc_candidates(env):
        if not nvcc.is_file():
            continue
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True).stdout
        m = re.search(r"release (\d+)\.(\d+)", out)
        if not m:
            continue
        version = Version(f"{m.group(1)}.{m.group(2)}")
        seen.append(f"{nvcc} ({version})")
        if (version.major, version.minor) == (want.major, want.minor):
            root, _ = _nvcc_layout(nvcc)
            real = root / "bin" / "nvcc"
            return CudaToolkit(nvcc=real if real.is_file() else nvcc, version=version, root=root)
    raise BuildError(
        f"no nvcc {want.major}.{want.minor} found for torch {env.torch_version} (CUDA {env.cuda})"
        + (f"; found {', '.join(seen)}" if seen else ""),
        hint=f"install CUDA {want.major}.{want.minor} and set CUDA_HOME, or pip install "
             f"the nvidia-cuda-nvcc wheel of that version into the environment")


def find_cxx() -> str:
    if os.environ.get("CXX"):
        found = shutil.which(os.environ["CXX"])
        if not found:
            raise BuildError(f"the C++ compiler CXX={os.environ['CXX']!r} was not found",
                             hint="point CXX at an installed compiler, or unset it")
        return found
    for cand in ("c++", "g++"):
        if shutil.which(cand):
            return shutil.which(cand)
    raise BuildError("no C++ compiler found", hint="install g++ (apt-get install g++) or set CXX")
