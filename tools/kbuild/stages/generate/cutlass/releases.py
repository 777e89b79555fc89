"""Which CUTLASS release a `cutlass_X_Y` name gives, and where its headers may come from.

A release is NVIDIA's tagged version (`v<version>`), identified by the tree digest of its two
header trees (`include/`, `tools/util/include/`; see `tree_digest`). Every source of it must
give exactly that digest: NVIDIA's tag archive (every release here), or a wheel on PyPI shown
to hold the same files (pinned by sha256). docs/cutlass.md has the table and the evidence.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ....core.backend import Backend
from ....core.errors import BuildError

SUBSTITUTE_VAR = "KBUILD_CUTLASS_SUBSTITUTE"
HEADER_TREES = ("include/", "tools/util/include/")
VERSION_H = "include/cutlass/version.h"
VERSION_TEMPLATE = resources.files("kbuild") / "resources" / "cutlass" / "version.h.in"


@dataclass(frozen=True)
class Wheel:
    """A wheel on PyPI whose header trees are the release's, file for file."""

    package: str
    version: str
    filename: str
    sha256: str         # of the wheel
    prefix: str         # folder of the CUTLASS tree inside the wheel (pure-Python wheels)

    def describe(self) -> str:
        return f"{self.package} {self.version} ({self.filename}) from PyPI"


@dataclass(frozen=True)
class Release:
    """NVIDIA's tagged CUTLASS release `version`, as its header trees."""

    version: str
    tree_sha256: str             # of include/ and tools/util/include/ as in the tag
    commit: str | None = None    # the tag's commit, where recorded
    wheel: Wheel | None = None   # a wheel shown identical, fetched before the tag archive
    generate_version_h: bool = False  # the tag has no version.h: CMake generated it

    @property
    def tag(self) -> str:
        return f"v{self.version}"

    @property
    def key(self) -> str:
        """Its folder in the cache: the same whichever source filled it."""
        return f"{self.version}-{self.tree_sha256[:16]}"

    @property
    def minor(self) -> tuple[int, int]:
        major, minor = self.version.split(".")[:2]
        return int(major), int(minor)

    def generated_files(self) -> dict[str, bytes]:
        """Files the builder adds to the tag's trees, as upstream's CMake install does."""
        if not self.generate_version_h:
            return {}
        major, minor, patch = self.version.split(".")
        text = (VERSION_TEMPLATE.read_text().replace("@MAJOR@", major).replace("@MINOR@", minor)
                .replace("@PATCH@", patch).replace("@VERSION@", self.version))
        return {VERSION_H: text.encode()}

    def generated_sha256(self) -> dict[str, str]:
        return {p: hashlib.sha256(b).hexdigest() for p, b in self.generated_files().items()}


def _nvidia(version: str, sha256: str) -> Wheel:
    pypi = f"{version}.0"
    return Wheel("nvidia-cutlass", pypi, f"nvidia_cutlass-{pypi}-py3-none-any.whl", sha256,
                 "cutlass_library/source/")


RELEASES = (
    Release("2.10.0", "09ee32b7754ffd72a4f9344f6633eecb5d44d7bffcb5936c352bc1e012554573",
            "fc9ebc645b63f3a6bc80aaefde5c063fb72110d6", generate_version_h=True),
    Release("3.5.1", "700e292cd35cef27e1b5eebc112ea0a03337beab9f168eaea7b232c9c1e9472e",
            wheel=_nvidia("3.5.1", "cb90ec9fec86504c1602175fa8a96756e9502884b6aac62a03f814e6b1bb35f1")),
    Release("3.6.0", "e6c24de09c18f44db76e231d75f04f647cbfc16ed903cc906ea1cc07cb322f83",
            wheel=_nvidia("3.6.0", "8b51469514e119d771e571ade9623a28de05c9ed01030666d17d4ce0b6737454")),
    Release("3.8.0", "ce2d7eb75865c39d4a08fdd195b8c5e374a5bec54784577e16e4d3bda4a69886",
            wheel=_nvidia("3.8.0", "013147221a63500205da233ae02e6262463917f3fe39cb09efbca37bfd1c39f9")),
    Release("3.9.2", "523d7666083b0f0f5d2f91b2aa6bc5e91e8d2b1cc1cf771c5dc7a1ee1006be4e",
            "ad7b2f5e84fcfa124cb02b91d5bd26d238c0459e"),
    Release("4.0.0", "fa7516cae34ce76b5039362d7153bf665478627c188691394853fbefafed7d29",
            "b995f933179c22d3fe0d871c3a53d11e4681950f"),
    Release("4.2.0", "ab258e23e64f2fbe382a108bd9571c7862280ab30d87b4c0ed3baa36c38ec4ea",
            wheel=_nvidia("4.2.0", "f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6")),
    Release("4.4.2", "17c74408687cff72494654b5fb38b690f72984a98e462cbfbb4d313fdbdeab57",
            wheel=Wheel("flashinfer-python", "0.6.10", "flashinfer_python-0.6.10-py3-none-any.whl",
                        "8bdfc2db80e462c41a1bc35dffeae9c6b4d012dee75e0766432c8efbdfd4398d",
                        "flashinfer/data/cutlass/")),
    Release("4.5.2", "eed27303517018ed7e2b43645a6b479988e4a308ccde34ee3fdb14e6192cdce3",
            "db1c288993354c88e551c40c19a8fb93a774a241"),
)
_BY_VERSION = {r.version: r for r in RELEASES}
# The names upstream kernel-builder pins (nix-builder/pkgs/cutlass) and their versions, and
# cutlass_4_2, which upstream does not name but whose release is provided here.
UPSTREAM = {"cutlass_2_10": "2.10.0", "cutlass_3_5": "3.5.1", "cutlass_3_6": "3.6.0",
            "cutlass_3_8": "3.8.0", "cutlass_3_9": "3.9.2", "cutlass_4_0": "4.0.0",
            "cutlass_4_4": "4.4.2", "cutlass_4_5": "4.5.2"}
CUTLASS = {name: _BY_VERSION[v] for name, v in sorted({**UPSTREAM, "cutlass_4_2": "4.2.0"}.items(),
                                                      key=lambda kv: _BY_VERSION[kv[1]].minor)}
# Dependencies of backends this builder does not compile.
OTHER_BACKENDS = {"sycl_tla": Backend.XPU, "metal-cpp": Backend.METAL, "cutlass_sycl": Backend.XPU}
NOT_PROVISIONED = {"torch"}  # handled by the build itself
CUTLASS_NAME = re.compile(r"cutlass_(\d+)_(\d+)")


def available() -> str:
    """Every provided CUTLASS name with its version."""
    return ", ".join(f"{n} ({r.version})" for n, r in CUTLASS.items())


def substitute_requested() -> bool:
    return os.environ.get(SUBSTITUTE_VAR, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Resolved:
    dep: str
    release: Release
    substitutes: str | None = None  # the CUTLASS version asked for, when another one is used

    def warning(self) -> str:
        return (f"{self.dep}: CUTLASS {self.substitutes} is not provided; using CUTLASS "
                f"{self.release.version} instead, as {SUBSTITUTE_VAR}/--cutlass-substitute asks. "
                "The kernel may not compile, or may behave differently")


def resolve(dep: str, *, manifest: Path, key: str, substitute: bool | None = None) -> Resolved:
    """The release a dependency name gives, or a BuildError naming the key."""
    if dep in CUTLASS:
        return Resolved(dep, CUTLASS[dep])
    if dep in OTHER_BACKENDS:
        raise BuildError(f"{dep} is a dependency of the {OTHER_BACKENDS[dep]} backend, which this "
                         "builder cannot compile", file=manifest, key=key,
                         hint=f"remove it; dependencies provided here: torch, {available()}")
    match = CUTLASS_NAME.fullmatch(dep)
    if not match:
        raise BuildError(f"unknown dependency {dep!r}", file=manifest, key=key,
                         hint=f"dependencies provided here: torch, {available()}")
    wanted = (int(match[1]), int(match[2]))
    newer = min((r for r in RELEASES if r.minor > wanted), key=lambda r: r.minor, default=None)
    substitute = substitute_requested() if substitute is None else substitute
    if substitute and newer:
        return Resolved(dep, newer, "{}.{}".format(*wanted))
    message = (f"{dep}: CUTLASS {wanted[0]}.{wanted[1]} is not provided: upstream kernel-builder "
               "pins no release of it, and no verified source of its tagged headers is known here")
    if newer is None:
        raise BuildError(message, file=manifest, key=key,
                         hint=f"use one that is provided: {available()}")
    raise BuildError(message, file=manifest, key=key,
                     hint=f"use one that is provided: {available()}; or build with "
                          f"--cutlass-substitute ({SUBSTITUTE_VAR}=1) to use CUTLASS "
                          f"{newer.version} instead, at your own risk")
