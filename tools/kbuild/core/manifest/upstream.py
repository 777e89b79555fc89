"""Names this builder accepts in a build.toml that upstream's kernel-builder rejects: each one
warned (one line naming the file and key), so that a manifest that builds here does not fail
upstream's CI unannounced. The build goes on."""

from __future__ import annotations

from pathlib import Path

from .model import Manifest

# kernel-builder's `Dependency` names: the CUTLASS releases it pins, SYCL-TLA, metal-cpp, torch.
UPSTREAM_DEPENDS = ("torch", "cutlass_2_10", "cutlass_3_5", "cutlass_3_6", "cutlass_3_8",
                    "cutlass_3_9", "cutlass_4_0", "cutlass_4_4", "cutlass_4_5", "sycl_tla",
                    "metal-cpp")
# What upstream names a dependency we accept under another name.
UPSTREAM_NAME = {"cutlass_sycl": "sycl_tla"}


def differences(manifest: Manifest, path: Path) -> list[str]:
    """One line per key of `manifest` that upstream's kernel-builder would refuse."""
    lines = []
    accepted = ", ".join(UPSTREAM_DEPENDS)
    for name, kernel in manifest.kernel.items():
        for dep in kernel.depends:
            if dep in UPSTREAM_DEPENDS:
                continue
            instead = (f"it names this one `{UPSTREAM_NAME[dep]}`" if dep in UPSTREAM_NAME
                       else f"it accepts {accepted}")
            lines.append(f"{path}: kernel.{name}.depends: upstream's kernel-builder rejects "
                         f"`{dep}` ({instead}); this builder goes on")
        if kernel.cuda_maxver is not None:
            lines.append(f"{path}: kernel.{name}.cuda-maxver: upstream's kernel-builder rejects "
                         "a kernel's cuda-maxver (it accepts cuda-minver per kernel, and maxver "
                         "in [general.cuda]); this builder goes on")
    return lines
