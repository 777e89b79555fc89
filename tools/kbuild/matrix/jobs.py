"""`build-all`'s plan: which environment builds which variant (`plan_jobs`), each build/ folder
written by one environment. A stable-ABI backend's variant is the same for every torch of a
toolkit, so of the environments that share it the one with the newest torch (that the stable-ABI
version allows) builds it and the others are reported as covered by it; a noarch project's
variant is the same for every environment of its backend. `ci.py` plans the CI's jobs from it,
`choose.py` finds the environment of a variant, `buildall.py` runs the builds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from ..core import manifest as manifest_mod
from ..core.variant import Variant
from ..stages import frameworks
from .matrix import EnvSpec


@dataclass
class EnvResult:
    env: str
    variant: str
    status: str                 # built | up to date | failed | interrupted | unavailable
                                # | covered (another environment builds its variant) | skipped
    seconds: float = 0.0        # wall time of this environment in this run
    env_seconds: float = 0.0    # creating the environment (0 when reused)
    build_seconds: float = 0.0  # the `kbuild build` process
    so_bytes: int | None = None
    log: str | None = None
    message: str = ""
    env_created: bool = False

    @property
    def ok(self) -> bool:
        return self.status in ("built", "up to date", "covered", "skipped")


@dataclass(frozen=True)
class Job:
    """One environment's build and the build/ folder it writes."""
    spec: EnvSpec
    variant: str
    covers: tuple[str, ...] = ()  # other environments whose variant this is


def env_variant(manifest: manifest_mod.Manifest, spec: EnvSpec, project: Path,
                platform: str = "linux-64") -> tuple[str | None, str]:
    """(the folder a build in `spec` writes on `platform`, or None and why it builds nothing)."""
    if spec.backend not in manifest.general.backends:
        return None, f"backend {spec.backend} is not listed in build.toml"
    if manifest.is_noarch:
        return Variant.noarch(spec.backend).name, ""
    regular = Variant.parse(spec.variant(platform))
    stable = (None if manifest.torch is None
              else frameworks.stable_abi_version(manifest, spec.backend, project))
    if stable is None:
        return regular.name, ""
    if (spec.release.major, spec.release.minor) < stable:
        return None, (f"torch {spec.release} is older than the stable-ABI version "
                      f"{stable[0]}.{stable[1]} this project targets")
    return frameworks.stable_variant(regular, stable).name, ""


def _rank(spec: EnvSpec) -> tuple[bool, Version]:
    """Which environment of several builds their variant: one realisable here, newest torch."""
    return (spec.available is None or spec.available.ok, Version(spec.torch_version))


def plan_jobs(project: Path, specs: list[EnvSpec], strict: tuple[str, ...] = ()
              ) -> tuple[list[Job], list[EnvResult]]:
    """The builds to run, one per variant, and the results of the environments that need none
    (covered by another's build, or skipped: a backend not listed, a torch too old for the
    stable ABI; an environment named on the command line is failed instead of skipped)."""
    manifest = manifest_mod.load(project, warn=lambda _: None)
    groups: dict[str, list[EnvSpec]] = {}
    settled: list[EnvResult] = []
    for spec in specs:
        variant, why = env_variant(manifest, spec, project)
        if variant is None:
            settled.append(EnvResult(spec.name, "-", "failed" if spec.name in strict
                                     else "skipped", message=why))
        else:
            groups.setdefault(variant, []).append(spec)
    jobs = []
    for variant, members in groups.items():
        chosen = max(members, key=_rank)
        others = tuple(s.name for s in members if s is not chosen)
        jobs.append(Job(chosen, variant, others))
        settled += [EnvResult(s.name, variant, "covered", message=f"{variant} is built by "
                              f"{chosen.name} (torch {chosen.torch_version})")
                    for s in members if s is not chosen]
    return jobs, settled
