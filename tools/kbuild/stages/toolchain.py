"""The compilers — the host C++ compiler, and the CUDA toolkit matching a torch.

One finder for CUDA: the candidates are the toolkit the build environment provides (`Toolkit`:
a realised matrix environment's, or `--cuda-home`), CUDA_HOME/CUDA_PATH/CUDA_ROOT, NVIDIA's
toolkit wheels in the target environment, `nvcc` on PATH, /usr/local/cuda-X.Y and
/usr/local/cuda; the first whose nvcc has the wanted major.minor wins.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from packaging.version import Version

from ..core.errors import BuildError
from ..core.runner import capture
from .torch_install import TorchInstall

# nvcc hands its arguments to /bin/sh when it runs the host compiler and its own tools, some
# unquoted and some in double quotes: `$(...)` in a CUDA flag or path would run. What reaches
# nvcc is limited to characters the shell leaves alone.
NVCC_SAFE = re.compile(r"^[A-Za-z0-9_\-+=.,/:@%^]*$")
NVCC_SAFE_TEXT = "letters, digits and - _ + = . , / : @ % ^"


@dataclass(frozen=True)
class Toolkit:
    """The toolkits a build environment provides, handed to the plan (never through os.environ).
    None: found by the search alone."""

    cuda_home: Path | None = None


@dataclass(frozen=True)
class CudaToolkit:
    nvcc: Path
    version: Version
    root: Path

    @cached_property
    def supported_archs(self) -> list[str]:
        """Real architectures nvcc can target, as capabilities like "9.0"."""
        out = capture([str(self.nvcc), "--list-gpu-arch"]).stdout
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
        out = capture([str(nvcc), "--dryrun", "-c", str(probe), "-o", str(probe) + ".o"], cwd=tmp)
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


def nvcc_version(nvcc: Path) -> tuple[int, int] | None:
    m = re.search(r"release (\d+)\.(\d+)", capture([str(nvcc), "--version"]).stdout)
    return (int(m.group(1)), int(m.group(2))) if m else None


def nvcc_candidates(site_packages: str | None = None, want: Version | None = None,
                    toolkit: Toolkit = Toolkit()) -> list[Path]:
    found: list[Path] = []
    if toolkit.cuda_home is not None:
        found.append(toolkit.cuda_home.absolute() / "bin" / "nvcc")
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        if os.environ.get(var):
            found.append(Path(os.environ[var]).absolute() / "bin" / "nvcc")
    if site_packages:  # NVIDIA's toolkit wheels inside the target environment
        site = Path(site_packages) / "nvidia"
        found += sorted(site.glob("cu*/bin/nvcc")) + sorted(site.glob("cuda_nvcc/bin/nvcc"))
    if shutil.which("nvcc"):
        found.append(Path(shutil.which("nvcc")))
    if want is not None:
        found.append(Path(f"/usr/local/cuda-{want.major}.{want.minor}/bin/nvcc"))
    found.append(Path("/usr/local/cuda/bin/nvcc"))
    return list(dict.fromkeys(found))


def find_toolkit(want: Version, site_packages: str | None = None,
                 toolkit: Toolkit = Toolkit()) -> tuple[CudaToolkit | None, list[str]]:
    """The first toolkit whose nvcc is CUDA `want` (major.minor), and what else was seen."""
    seen = []
    for nvcc in nvcc_candidates(site_packages, want, toolkit):
        if not nvcc.is_file():
            continue
        version = nvcc_version(nvcc)
        if version is None:
            continue
        seen.append(f"{nvcc} ({version[0]}.{version[1]})")
        if version == (want.major, want.minor):
            root, _ = _nvcc_layout(nvcc)
            real = root / "bin" / "nvcc"
            return CudaToolkit(nvcc=real if real.is_file() else nvcc,
                               version=Version(f"{version[0]}.{version[1]}"), root=root), seen
    return None, seen


def find_cuda(torch: TorchInstall, toolkit: Toolkit = Toolkit()) -> CudaToolkit:
    """The CUDA toolkit whose major.minor matches torch's CUDA runtime (`toolkit`'s first)."""
    if not torch.cuda:
        raise BuildError(f"torch {torch.torch_version} in {torch.python} is not a CUDA build",
                         hint="use an environment with a CUDA torch, or build --backend cpu")
    want = Version(torch.cuda)
    found, seen = find_toolkit(want, torch.site_packages, toolkit)
    if found is None:
        raise BuildError(
            f"no nvcc {want.major}.{want.minor} found for torch {torch.torch_version} (CUDA {torch.cuda})"
            + (f"; found {', '.join(seen)}" if seen else ""),
            hint=f"install CUDA {want.major}.{want.minor} and set CUDA_HOME, or pip install "
                 f"the nvidia-cuda-nvcc wheel of that version into the environment")
    return found


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
