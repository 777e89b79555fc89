"""`kbuild matrix update`: torch releases newer than the matrix, read from a package index
(torch_releases.py), added to pixi.toml in the file's own style.

A newer minor release gets environments (torch feature per flavour, toolkit features for new CUDA
versions, an environment each); a newer patch release of a minor already in the matrix moves that
minor's pins.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from packaging.version import Version

from ..core.errors import BuildError
from ..core.runner import capture
from .torch_releases import Release, releases
from .matrix import Matrix, _parse


@dataclass
class Changes:
    text: str                                          # the new pixi.toml
    added: list[str] = field(default_factory=list)     # environment names
    bumped: list[str] = field(default_factory=list)    # "2.14.1 -> 2.14.2"

    def diff(self, old: str, name: str) -> str:
        return "".join(difflib.unified_diff(old.splitlines(True), self.text.splitlines(True),
                                            f"a/{name}", f"b/{name}"))


def newer_than(mx: Matrix) -> Callable[[Version], bool]:
    """Whether a torch release is newer than what the matrix pins (a new minor, or a new patch)."""
    pins: dict[tuple[int, int], Version] = {}
    for env in mx.envs:
        pins[(env.release.major, env.release.minor)] = Version(env.torch_version)
    latest = max(pins, default=(0, 0))

    def wanted(v: Version) -> bool:
        key = (v.major, v.minor)
        return v > pins[key] if key in pins else key > latest
    return wanted


def uv_resolver(inst, index: str, python: str) -> Callable[[Version], str | None]:
    """The flavour of PyPI's default wheel of a torch release, from what uv resolves it to
    (metadata only; this machine's install constraints don't apply to reading an index)."""
    from .envs import wheel_compute

    def resolve(version: Version) -> str | None:
        cmd = [inst.uv, "pip", "compile", "-", "--quiet", "--no-header", "--no-annotate", "--no-config",
               "--python-version", python, "--python-platform", "x86_64-manylinux_2_28",
               "--index-url", index]
        proc = capture(cmd, input=f"torch==={version}\n", env=inst._env(), timeout=300)
        if proc.returncode != 0:
            return None
        pins = {}
        for line in proc.stdout.splitlines():
            name, sep, pin = line.strip().partition("==")
            if sep:
                pins[name.split("[")[0].lower()] = pin.split(";")[0].strip()
        return wheel_compute(pins)
    return resolve


# --- editing pixi.toml ---------------------------------------------------------------------------

def _blocks(text: str) -> list[list[str]]:
    """The file cut before each table header (the first block is what precedes any)."""
    blocks: list[list[str]] = [[]]
    for line in text.splitlines(True):
        if re.match(r"^\[", line):
            # a comment block directly above a header belongs to that header
            lead = []
            while blocks[-1] and blocks[-1][-1].lstrip().startswith("#"):
                lead.insert(0, blocks[-1].pop())
            blocks.append(lead + [line])
        else:
            blocks[-1].append(line)
    return blocks


def _header(block: list[str]) -> str:
    for line in block:
        if line.startswith("["):
            return line.strip()
    return ""


def _cuda_name(compute: str) -> str:
    return "cuda" + compute.removeprefix("cu")


def _cuda_version(compute: str) -> str:
    digits = compute.removeprefix("cu")
    return f"{digits[:-1]}.{digits[-1]}"


def plan(mx: Matrix, found: dict[Version, Release]) -> Changes:
    """The matrix's pixi.toml with `found`'s newer releases added (and newer patches pinned)."""
    text = mx.path.read_text(encoding="utf-8")
    by_minor: dict[tuple[int, int], list] = {}
    for env in mx.envs:
        by_minor.setdefault((env.release.major, env.release.minor), []).append(env)
    if not by_minor:
        raise BuildError("the matrix has no torch environment to follow", file=mx.path,
                         key="environments")
    latest = max(by_minor)
    latest_envs = by_minor[latest]
    min_cuda = min((Version(e.cuda) for e in latest_envs if e.cuda), default=None)
    newest_patch: dict[tuple[int, int], Version] = {}
    for v in found:
        key = (v.major, v.minor)
        newest_patch[key] = max(newest_patch.get(key, v), v)
    changes = Changes(text)

    # newer patches of minors in the matrix: move their pins
    blocks = _blocks(text)
    for minor, envs in sorted(by_minor.items()):
        pin = Version(envs[0].torch_version)
        new = newest_patch.get(minor)
        if new is None or new <= pin:
            continue
        feats = {f for e in envs for f in e.features if f.startswith(f"pt{minor[0]}{minor[1]}-")}
        for block in blocks:
            m = re.match(r"^\[feature\.([^.\]]+)\.pypi-dependencies\]", _header(block))
            if m and m.group(1) in feats:
                block[:] = [re.sub(rf'"==\s*{re.escape(str(pin))}"', f'"=={new}"', ln)
                            if ln.lstrip().startswith("torch") else ln for ln in block]
        changes.bumped.append(f"{pin} -> {new}")

    # newer minors: features and environments
    new_minors = sorted(k for k in newest_patch if k > latest)
    feature_names = set(mx.raw.get("feature", {}))
    pt_blocks = [b for b in blocks if re.match(r"^\[feature\.pt\d+-\w+\.pypi-dependencies\]", _header(b))]
    cuda_blocks = [b for b in blocks if re.match(r"^\[feature\.cuda\d+[.\]]", _header(b))]
    if not new_minors:
        changes.text = "".join(line for block in blocks for line in block)
        _validate(changes.text, mx.path)
        return changes
    if not pt_blocks or not cuda_blocks:
        raise BuildError("no `ptXY-<compute>` torch feature or `cudaXYZ` toolkit feature to copy",
                         file=mx.path, key="feature")
    index_line = next((ln for ln in pt_blocks[-1] if ln.lstrip().startswith("torch")), "")
    index_base = re.search(r'index\s*=\s*"([^"]*)/[^/"]+"', index_line)
    env_lines = _environment_lines(text)
    template = {("cpu" if "-cpu " in ln else "cuda"): ln for ln in env_lines}
    new_pt, new_cuda, new_envs = [], [], []
    for minor in new_minors:
        version = newest_patch[minor]
        tag = f"{minor[0]}{minor[1]}"
        release = found[version]
        computes = sorted((c for c in release.computes if c == "cpu" or min_cuda is None
                           or Version(_cuda_version(c)) >= min_cuda),
                          key=lambda c: (c == "cpu", int(c[2:]) if c != "cpu" else 0))
        for compute in computes:
            kind = "cpu" if compute == "cpu" else "cuda"
            if kind not in template:
                continue  # the matrix has no environment of this kind to copy
            feature = f"pt{tag}-{compute}"
            index = f', index = "{index_base.group(1)}/{compute}"' if index_base else ""
            new_pt.append([f"[feature.{feature}.pypi-dependencies]\n",
                           f'torch = {{ version = "=={version}"{index} }}\n', "\n"])
            if kind == "cuda" and _cuda_name(compute) not in feature_names:
                new_cuda.append(_toolkit_blocks(cuda_blocks, compute))
                feature_names.add(_cuda_name(compute))
            platforms = [p for p in mx.platforms if p in release.computes[compute]] or \
                sorted(release.computes[compute])
            new_envs.append(_environment_line(template[kind], f"torch{tag}-{compute}", feature,
                                              _cuda_name(compute) if kind == "cuda" else None,
                                              platforms))
            changes.added.append(f"torch{tag}-{compute}")
    if new_pt:
        _insert_after(blocks, pt_blocks[-1], new_pt)
    if new_cuda:
        _insert_after(blocks, cuda_blocks[-1], new_cuda)
    changes.text = "".join(line for block in blocks for line in block)
    if new_envs:
        last = env_lines[-1]
        changes.text = changes.text.replace(last, last + "".join(new_envs), 1)
    _validate(changes.text, mx.path)
    return changes


def _environment_lines(text: str) -> list[str]:
    body = text.split("[environments]", 1)[1].split("\n[", 1)[0] if "[environments]" in text else ""
    return [ln + "\n" for ln in body.splitlines() if re.match(r"^torch\d+-(cu\d+|cpu)\s*=", ln)]


def _environment_line(template: str, name: str, feature: str, cuda: str | None,
                      platforms: list[str]) -> str:
    old = re.match(r"^(torch\d+-(?:cu\d+|cpu))", template).group(1)
    line = template.replace(f'"{old}"', f'"{name}"').replace(old + " ", name + " ", 1)
    line = re.sub(r'features\s*=\s*\[[^\]]*\]', 'features = [' + ", ".join(
        f'"{f}"' for f in [feature] + ([cuda] if cuda else [])) + "]", line)
    if "platforms" in line:
        line = re.sub(r'platforms\s*=\s*\[[^\]]*\]',
                      "platforms = [" + ", ".join(f'"{p}"' for p in platforms) + "]", line)
    return line


def _toolkit_blocks(cuda_blocks: list[list[str]], compute: str) -> list[str]:
    """A toolkit feature for `compute`, copied from the newest existing one."""
    newest = max({re.match(r"^\[feature\.(cuda\d+)", _header(b)).group(1) for b in cuda_blocks},
                 key=lambda n: int(n[4:]))
    old_version = _cuda_version("cu" + newest[4:])
    lines = []
    for block in cuda_blocks:
        if _header(block).startswith(f"[feature.{newest}.") or _header(block) == f"[feature.{newest}]":
            for ln in block:
                if ln.lstrip().startswith("#"):
                    continue
                ln = ln.replace(f"feature.{newest}", f"feature.{_cuda_name(compute)}")
                lines.append(ln.replace(f'"{old_version}.*"', f'"{_cuda_version(compute)}.*"'))
    return lines


def _insert_after(blocks: list[list[str]], anchor: list[str], new: list[list[str]]) -> None:
    at = next(i for i, b in enumerate(blocks) if b is anchor) + 1
    if anchor and anchor[-1].strip():
        anchor.append("\n")
    for offset, block in enumerate(new):
        blocks.insert(at + offset, block)


def _validate(text: str, path: Path) -> None:
    """The edited file parses into a matrix whose every environment agrees with its name."""
    import tempfile

    from .matrix import name_problems
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:  # a bug here, not bad input
        raise BuildError(f"the updated matrix is not valid TOML ({e})", file=path) from None
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        copy.write_text(text, encoding="utf-8")
        problems = [p for env in _parse(copy).envs for p in name_problems(env)]
    if problems:
        raise BuildError(f"the updated matrix is inconsistent: {problems}", file=path)


# --- `kbuild matrix update` -----------------------------------------------------------------

def default_index(mx: Matrix) -> str:
    """[tool.kbuild.update] index in pixi.toml, else pip's configured index, else PyPI."""
    from .installer import pip_config
    return (mx.tool.update.index
            or (pip_config().get("index-url") or ["https://pypi.org/simple"])[0])


def find_updates(mx: Matrix, index: str) -> tuple[Changes, list[str]]:
    """The changes that bring `mx` up to the torch releases on `index`, and the releases whose
    flavour could not be read (left out)."""
    from .installer import installer
    from .lock import python_minor

    unknown: list[str] = []
    python = python_minor(mx.envs[0]) if mx.envs else "3.11"

    def resolver(version):  # PyPI's default wheel without core metadata: ask uv
        inst = installer()
        return uv_resolver(inst, index, python)(version) if inst.uv else None
    found = releases(index, python, newer_than(mx), resolver, unknown=unknown)
    return plan(mx, found), unknown
