"""The build environment — the target interpreter's torch (compilers: toolchain.py)."""

from __future__ import annotations

import json
import re
import shutil
import sys
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from packaging.version import Version

from ..core.errors import BuildError
from ..core.files import write_atomic
from ..core.runner import capture


@dataclass(frozen=True)
class TorchInstall:
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
    def cuda_library_include_dirs(self) -> list[str]:
        """Headers of the NVIDIA libraries this torch was installed with (cuRAND, cuFFT, cuDNN,
        NCCL... from its nvidia-* wheels): upstream's torch hands its CUDA libraries' headers to
        every kernel (`curand_kernel.h` for dropout), and a toolkit of nvcc alone lacks them."""
        site = Path(self.site_packages) / "nvidia"
        return [str(p) for p in sorted(site.glob("*/include")) if p.is_dir()]

    @property
    def lib_dir(self) -> str:
        return str(Path(self.torch_root) / "lib")


def _cache_key(python: str) -> str | None:
    proc = capture([python, "-c", "import sys; print(sys.prefix)"])
    if proc.returncode != 0:
        return None
    out = proc.stdout.strip()
    versions = list(Path(out).glob("lib/python*/site-packages/torch/version.py"))
    if not versions:
        return None
    st = versions[0].stat()
    return f"{Path(python).absolute()}|{versions[0]}|{st.st_mtime_ns}|{st.st_size}"


def read_torch_install(python: str | None = None, *, cache_file: Path | None = None) -> TorchInstall:
    """Inspects torch in `python` (default: this interpreter), cached by torch's install stamp."""
    python = python or sys.executable
    if not shutil.which(python) and not Path(python).is_file():
        raise BuildError(f"Python interpreter {python!r} not found",
                         hint="pass an existing interpreter with --python")
    key = _cache_key(python) if cache_file else None
    cache: dict = {}
    if cache_file and cache_file.is_file():
        try:
            cache = json.loads(cache_file.read_text())
        except ValueError:
            cache = {}
        if key and key in cache:
            return TorchInstall(**cache[key])
    script = resources.files("kbuild") / "resources" / "scripts" / "inspect_torch.py"
    proc = capture([python, str(script)])
    try:
        info = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise BuildError(f"could not inspect torch with {python}: {proc.stderr.strip()[-400:]}",
                         hint="check that the interpreter runs") from None
    if "error" in info:
        raise BuildError(f"{python}: {info['error']}",
                         hint="install torch in this environment (e.g. pip install torch==2.13.0), "
                              "or pass another interpreter with --python")
    env = TorchInstall(**info)
    if cache_file and key:
        cache[key] = asdict(env)
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(cache_file, json.dumps(cache, indent=1))
    return env


_CAPABILITY = re.compile(r"^[1-9][0-9]?\.[0-9][af]?$")  # 8.0, 9.0a, 10.0f, 12.1
_GPU_QUERY = ("import torch\n"
              "n = torch.cuda.device_count() if torch.cuda.is_available() else 0\n"
              "print(' '.join('%d.%d' % torch.cuda.get_device_capability(i) for i in range(n)))")


def local_capabilities(value: str, python: str | None) -> list[str]:
    """`--cuda-capabilities`: a comma-separated list, or `native` (the GPUs the target
    interpreter's torch sees)."""
    if value.strip() == "native":
        proc = capture([python or sys.executable, "-c", _GPU_QUERY], timeout=120)
        caps = sorted(set(proc.stdout.split())) if proc.returncode == 0 else []
        if not caps:
            raise BuildError("--cuda-capabilities native: no CUDA GPU is visible to "
                             f"{python or sys.executable}",
                             hint="name the capabilities instead, e.g. --cuda-capabilities 9.0")
        return caps
    caps = [c.strip() for c in value.split(",") if c.strip()]
    bad = [c for c in caps if not _CAPABILITY.match(c)]
    if bad or not caps:
        raise BuildError(f"--cuda-capabilities {value!r}: {', '.join(bad) or 'nothing'} is not a "
                         "CUDA capability", hint="write them like 8.0,9.0,10.0f (a major from 1, "
                         "a one-digit minor, optionally a or f), or `native`")
    return list(dict.fromkeys(caps))
