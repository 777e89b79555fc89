"""The workflow files: one kernel project's (`kbuild init`, `kbuild ci-workflow`) and a
repository of many kernels' (`kbuild ci-workflow --monorepo`), from resources/workflows/, and
writing one into place without following a link."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path
from typing import Callable

from ..core.errors import BuildError
from ..core.files import write_atomic
from ..core.layout import MANIFEST
from ..matrix.ci import MAX_JOBS

TEMPLATES = resources.files("kbuild") / "resources" / "workflows"
BUILDER = "pixi-kernel-builder"
PROJECT_WORKFLOW = ".github/workflows/kernel.yml"
# kernels-community's name: the `kernels` loader trusts signatures of
# huggingface/kernels-community's `.github/workflows/build.yaml@refs/heads/main` by default.
MONOREPO_NAME = "build.yaml"
PLACEHOLDER_ORG = "your-org"
PLACEHOLDER_REQUIREMENT = (f"{BUILDER} @ git+https://github.com/YOUR-ORG/{BUILDER}@main"
                           "#subdirectory=tools")
SLOT = re.compile(r"@[A-Z_]+@")
ORG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
KERNEL_FOLDER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")  # what the workflow accepts as a name
Warn = Callable[[str], None]


def builder_requirement() -> tuple[str, bool]:
    """How CI installs this builder (a pip requirement), and whether it is known: the git URL
    and commit a pip/uv install from git recorded, or this checkout's public remote and commit;
    else a placeholder to edit."""
    from ..core.runner import capture
    try:
        direct = json.loads(metadata.distribution(BUILDER).read_text("direct_url.json") or "{}")
    except metadata.PackageNotFoundError:
        direct = {}
    vcs = direct.get("vcs_info") or {}
    if vcs.get("vcs") == "git" and direct.get("url", "").startswith("https://"):
        sub = direct.get("subdirectory")
        return (f"{BUILDER} @ git+{direct['url']}@{vcs['commit_id']}"
                + (f"#subdirectory={sub}" if sub else ""), True)
    tools = Path(__file__).resolve().parents[2]
    if (tools / "pyproject.toml").is_file():
        remote = capture(["git", "-C", str(tools), "remote", "get-url", "origin"]).stdout.strip()
        head = capture(["git", "-C", str(tools), "rev-parse", "HEAD"]).stdout.strip()
        if remote.startswith("https://") and "@" not in remote and len(head) == 40:
            return f"{BUILDER} @ git+{remote}@{head}#subdirectory=tools", True
    return PLACEHOLDER_REQUIREMENT, False


def digest_outputs(slots: int = MAX_JOBS) -> str:
    """The build job's outputs: one per matrix job (GitHub combines the differently named
    outputs of a matrix's jobs; a name two jobs set keeps only the last)."""
    return "".join(f"      d{i}: ${{{{ steps.digest.outputs.d{i} }}}}\n" for i in range(slots))


def render(template: str, values: dict[str, str]) -> str:
    text = (TEMPLATES / template).read_text(encoding="utf-8")
    text = text.replace("      # @DIGEST_OUTPUTS@\n", digest_outputs())
    for slot, value in values.items():
        text = text.replace(f"@{slot}@", value)
    left = SLOT.findall(text)
    assert not left, f"{template}: unfilled {left}"
    return text


def _requirement(where: str, warn: Warn) -> str:
    requirement, known = builder_requirement()
    if not known:
        warn(f"{where}: set KBUILD to where CI installs {BUILDER} from (it is not on PyPI)")
    return requirement


def project_workflow(warn: Warn = lambda _: None) -> str:
    """The CI workflow of one kernel project (resources/workflows/project.yml)."""
    return render("project.yml", {"KBUILD_REQUIREMENT": _requirement(PROJECT_WORKFLOW, warn)})


def monorepo_workflow(org: str, warn: Warn = lambda _: None) -> str:
    """The CI workflow of a repository of kernel folders (resources/workflows/monorepo.yml);
    `org`: the Hub organisation its kernels upload to by default."""
    if not ORG.fullmatch(org):
        raise BuildError(f"--org {org!r} is not a Hub organisation name", key="--org",
                         hint="letters, digits, `-`, `_` and `.`, as on the Hub")
    return render("monorepo.yml", {"KBUILD_REQUIREMENT": _requirement("the workflow", warn),
                                   "ORG": org})


def kernel_folders(root: Path) -> list[str]:
    """The kernel folders of a repository: each folder at its root holding a build.toml."""
    return sorted(p.parent.name for p in root.glob(f"*/{MANIFEST}")
                  if p.is_file() and not p.parent.is_symlink() and not p.parent.name.startswith("."))


def default_org(root: Path, kernels: list[str]) -> str | None:
    """The organisation most of the kernels' `[general.hub] repo-id`s name."""
    from ..core import manifest as manifest_mod
    orgs: Counter[str] = Counter()
    for name in kernels:
        try:
            repo = manifest_mod.load(root / name, warn=lambda _: None).general.hub.repo_id
        except BuildError:
            continue
        if repo:
            orgs[repo.split("/", 1)[0]] += 1
    return orgs.most_common(1)[0][0] if orgs else None


def workflow_file(name: str) -> str:
    """`.github/workflows/NAME` (NAME.yml unless it ends in .yml or .yaml)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or ".." in name:
        raise BuildError(f"--name {name!r} is not a workflow file name", key="--name",
                         hint="letters, digits, `-`, `_` and `.`, e.g. build.yaml")
    return f".github/workflows/{name if name.endswith(('.yml', '.yaml')) else name + '.yml'}"


def write(root: Path, rel: str, text: str, *, force: bool) -> Path:
    """Writes ROOT/REL atomically: a new temporary file (never one that exists, never through a
    link) renamed over the target. Refuses a linked folder on the way (`.github`, its
    `workflows`), and an existing file (a link too) without `force`; with it, a link is
    replaced, never written through."""
    target = root / rel
    for folder in reversed(target.relative_to(root).parents[:-1]):
        if (root / folder).is_symlink():
            raise BuildError(f"{root / folder} is a symbolic link (to {os.readlink(root / folder)}); "
                             "nothing was written", hint="the workflow goes into the repository "
                             "itself: replace the link by a folder")
    if (target.exists() or target.is_symlink()) and not force:
        raise BuildError(f"{target} exists; nothing was written", hint="pass --force to replace it")
    if target.is_dir() and not target.is_symlink():
        raise BuildError(f"{target} is a folder; nothing was written")
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, text)
    return target


def umask() -> int:
    """The process's umask (read by setting it back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


@dataclass(frozen=True)
class Monorepo:
    """What `ci-workflow --monorepo` wrote: the workflow, the kernel folders it builds, the
    organisation uploads go to, and the folders whose names it cannot build."""
    path: Path
    kernels: list[str]
    org: str
    unnamed: list[str]


def write_monorepo(root: Path, org: str | None, name: str, *, force: bool, warn: Warn) -> Monorepo:
    """The workflow of a repository of kernel folders, at its root (refused in a kernel project,
    or where there is no kernel folder); the organisation is `org`, else the one most
    build.toml repo-ids name (else a placeholder, warned)."""
    if (root / MANIFEST).is_file():
        raise BuildError(f"{root} is a kernel project; --monorepo writes the workflow of a "
                         "repository of kernel folders", file=root / MANIFEST,
                         hint="run it at the repository's root, or leave out --monorepo")
    kernels = kernel_folders(root)
    if not kernels:
        raise BuildError(f"no kernel folder in {root} (a folder with a {MANIFEST})",
                         hint="run it at the root of a repository of kernel folders")
    chosen = org or default_org(root, kernels)
    if chosen is None:
        warn(f"no --org and no build.toml names a repo-id: uploads go to {PLACEHOLDER_ORG}"
             "/<kernel>; edit repo_prefix in the workflow, or pass --org")
    rel = workflow_file(name)
    text = monorepo_workflow(chosen or PLACEHOLDER_ORG, warn)
    target = write(root, rel, text, force=force)
    return Monorepo(target, kernels, chosen or PLACEHOLDER_ORG,
                    [k for k in kernels if not KERNEL_FOLDER.fullmatch(k)])


def write_project(root: Path, *, force: bool, warn: Warn) -> Path:
    """The one-project workflow, in a kernel project."""
    if not (root / MANIFEST).is_file():
        raise BuildError(f"no {MANIFEST} in {root}", hint="run it in a kernel project (or "
                         "--monorepo at the root of a repository of kernel folders)")
    return write(root, PROJECT_WORKFLOW, project_workflow(warn), force=force)


def git_root(path: Path) -> Path | None:
    """The root of the git repository `path` is in (GitHub reads workflows only there)."""
    from ..core.runner import capture
    proc = capture(["git", "-C", str(path), "rev-parse", "--show-toplevel"])
    return Path(proc.stdout.strip()).resolve() if proc.returncode == 0 and proc.stdout.strip() else None
