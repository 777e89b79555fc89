"""`kbuild lock`: the locks of every selected environment (and of its toolkit) for one platform,
written where missing, stale or asked to be upgraded, left as they are where current."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.errors import BuildError
from . import envs as envs_mod
from . import lock as lock_mod
from .matrix import EnvSpec, Matrix


@dataclass(frozen=True)
class LockRow:
    env: str                 # the environment it belongs to
    target: str              # what was locked: the environment, or its toolkit
    path: Path | None        # the lock file (None: skipped)
    status: str              # current | written | failed | skipped
    reason: str = ""         # why it failed or was skipped

    @property
    def failed(self) -> bool:
        return self.status == "failed"


def lock_envs(mx: Matrix, specs: list[EnvSpec], platform: str, *, envs_dir: Path,
              upgrade: bool = False, torch_index: bool = False) -> list[LockRow]:
    """One row per lock of `specs` (a toolkit shared by several environments appears once).
    On this machine's platform, an environment that cannot be realised here is skipped unless
    its lock is current. `envs_dir`: where its availability probes are cached."""
    if platform == lock_mod.host_platform():
        specs = envs_mod.annotate(specs, envs_dir, torch_index=torch_index)
    inst = envs_mod.installer()
    rows: list[LockRow] = []
    done: set[str] = set()
    for spec in specs:
        existing = {st.target.name: st for st in lock_mod.states(spec, platform)}
        own = existing.get(spec.name)
        if spec.available is not None and not spec.available.ok and not (
                own and own.state == "current" and not upgrade):
            rows.append(LockRow(spec.name, spec.name, None, "skipped", spec.available.reason))
            continue
        index = torch_index or (own is not None and own.lock is not None and own.lock.torch_index)
        targets = [lock_mod.toolkit_target(spec, platform),
                   lock_mod.env_target(spec, platform, index)]
        for target in filter(None, targets):
            if target.name in done:
                continue
            done.add(target.name)
            path = lock_mod.lock_path(mx.locks, platform, target.name)
            state = existing.get(target.name)
            if state is not None and state.state == "current" and not upgrade:
                rows.append(LockRow(spec.name, target.name, path, "current"))
                continue
            try:
                lock_mod.resolve(target, mx.locks, inst)
                rows.append(LockRow(spec.name, target.name, path, "written"))
            except BuildError as e:
                where = f" (key `{e.key}`)" if e.key else ""
                rows.append(LockRow(spec.name, target.name, path, "failed", e.message + where))
    return rows
