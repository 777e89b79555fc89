"""Every path the builder reads or writes in a kernel project, named once.

    PROJECT/build.toml              the manifest
    PROJECT/pixi.toml               the environment matrix (optional)
    PROJECT/build/<variant>/        built variants (`metadata.json` marks one; its signature
                                    `metadata.json.sigstore` beside it once signed)
    PROJECT/compile_commands.json   the last build's compile commands (for clangd, VS Code);
                                    never over a file or link the builder did not write
    PROJECT/.kbuild/                everything generated (removed by `kbuild clean`):
        <variant>/                  generated build files, cmake-build/, build.log
        staging/                    variants being assembled, renamed into build/ when complete
        envs/                       PyPI-realised environments ($KBUILD_ENVS_DIR overrides)
        logs/                       build-all and environment logs
        buildall/                   build-all fingerprints
        bench/                      `kbuild bench` results
        import/<module>             the variant a test run imports as `<module>` (a link)
        tested/<digest>             where a test run's LOCAL_KERNELS points: a link to the one
                                    variant it loads, or a folder of links to each of several
        torch-installs.json         cache of inspected torch installations
        compile_commands.sha256     the digest of the compile_commands.json the builder wrote

What the builder writes into a project (`BUILDER_WRITES`) is never an input: git changes there
do not make a build `_dirty` (core/gitinfo.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "build.toml"
PIXI_TOML = "pixi.toml"
METADATA = "metadata.json"
SIGNATURE = "metadata.json.sigstore"  # the Sigstore bundle of metadata.json's bytes
BUILD_DIR = "build"
WORK_DIR = ".kbuild"
TORCH_EXT = "torch-ext"
ENVS_DIR_VAR = "KBUILD_ENVS_DIR"
COMPILE_COMMANDS = "compile_commands.json"
# Git pathspecs, relative to a project, of what builds write there (compile_commands.json and
# .kbuild/ in nested projects too; build/ at the project's root only: elsewhere it may be source).
BUILDER_WRITES = (f"**/{COMPILE_COMMANDS}", f"**/{WORK_DIR}/**", f"{BUILD_DIR}/**")


@dataclass(frozen=True)
class Layout:
    """The paths of one project; `build_dir` may be moved with --build-dir."""

    root: Path
    build_override: Path | None = None

    @classmethod
    def of(cls, project: Path, build_dir: Path | None = None) -> "Layout":
        return cls(project.resolve(), build_dir.resolve() if build_dir else None)

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def pixi_toml(self) -> Path:
        return self.root / PIXI_TOML

    @property
    def build_dir(self) -> Path:
        return self.build_override or self.root / BUILD_DIR

    def variant_dir(self, name: str) -> Path:
        return self.build_dir / name

    @property
    def work(self) -> Path:
        return self.root / WORK_DIR

    def variant_work(self, name: str) -> Path:
        return self.work / name

    @property
    def staging(self) -> Path:
        """Next to the build folder's own work dir, so the final rename stays on one filesystem."""
        return self.build_dir.parent / WORK_DIR / "staging"

    @property
    def envs(self) -> Path:
        if os.environ.get(ENVS_DIR_VAR):
            return Path(os.environ[ENVS_DIR_VAR]).resolve()
        return self.work / "envs"

    @property
    def logs(self) -> Path:
        return self.work / "logs"

    @property
    def buildall_state(self) -> Path:
        return self.work / "buildall"

    @property
    def bench(self) -> Path:
        return self.work / "bench"

    @property
    def import_shim(self) -> Path:
        """The folder on a test run's PYTHONPATH: `<module>` links to the variant tested."""
        return self.work / "import"

    @property
    def tested(self) -> Path:
        """Links to exactly the variants a test run loads, where its LOCAL_KERNELS points (never
        at build/, with whatever else it holds)."""
        return self.work / "tested"

    @property
    def compile_commands(self) -> Path:
        """The last build's compile commands, where clangd and VS Code look for them."""
        return self.root / COMPILE_COMMANDS

    @property
    def compile_commands_mark(self) -> Path:
        """The digest of the compile_commands.json the builder wrote last: only that file is
        ever replaced (a user's own file, or a link, is left alone)."""
        return self.work / "compile_commands.sha256"

    @property
    def torch_cache(self) -> Path:
        return self.work / "torch-installs.json"

    def module_dir(self, module: str) -> Path:
        return self.root / TORCH_EXT / module
