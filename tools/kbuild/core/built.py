"""A built variant: its folder and its typed metadata.json, what ships from it, and its digest.

Assemble writes one (`BuiltVariant.write`); check, upload, to-wheel and the model card take one
(`BuiltVariant.read`, or `load` where an unreadable variant is an error). What ships and what the
digest covers are decided here, and only here.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from pathlib import Path

from .errors import BuildError
from .layout import METADATA, SIGNATURE
from .metadata import MetadataProblem, VariantMetadata, parse

# Files the digest does not cover: the metadata that holds it, and its signature.
DIGEST_EXCLUDED = {METADATA, SIGNATURE}


def _bytecode(rel: Path) -> bool:
    return "__pycache__" in rel.parts or rel.suffix == ".pyc"


def shipped_files(folder: Path) -> list[Path]:
    """Every file of a variant folder that ships (uploads, wheels): all but Python bytecode."""
    return sorted(p for p in folder.rglob("*")
                  if p.is_file() and not _bytecode(p.relative_to(folder)))


def is_variant_dir(path: Path, *, built: bool = False) -> bool:
    """The one rule for a variant folder of a build: a folder (or a link to one) not named with
    a leading `.`; `built`: only one that holds a metadata.json, as assemble leaves it (check,
    sign and upload judge every folder, so that a broken one is named rather than skipped)."""
    return (not path.name.startswith(".") and path.is_dir()
            and (not built or (path / METADATA).is_file()))


def variant_dirs(build_dir: Path, *, built: bool = False) -> list[Path]:
    """The variant folders of `build_dir` (`is_variant_dir`), sorted; none when it is no folder."""
    if not build_dir.is_dir():
        return []
    return sorted(p for p in build_dir.iterdir() if is_variant_dir(p, built=built))


def digest_files(folder: Path) -> dict[str, str]:
    """sha256 (base64) of every shipped file but the top-level metadata, by relative path."""
    files = {}
    for path in shipped_files(folder):
        rel = path.relative_to(folder).as_posix()
        if rel not in DIGEST_EXCLUDED:
            files[rel] = base64.b64encode(hashlib.sha256(path.read_bytes()).digest()).decode()
    return files


@dataclass(frozen=True)
class BuiltVariant:
    path: Path
    metadata: VariantMetadata

    @property
    def name(self) -> str:
        return self.path.name

    def files(self) -> list[Path]:
        return shipped_files(self.path)

    def digest(self) -> dict[str, str]:
        return digest_files(self.path)

    @classmethod
    def write(cls, path: Path, metadata: VariantMetadata) -> "BuiltVariant":
        (path / METADATA).write_text(metadata.to_json(), encoding="utf-8")
        return cls(path, metadata)

    @classmethod
    def read(cls, path: Path) -> tuple["BuiltVariant | None", list[MetadataProblem]]:
        """(variant, []), or (None, problems) when its metadata.json is missing, not JSON or of
        the wrong shape."""
        try:
            text = (path / METADATA).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None, [MetadataProblem("metadata.missing", "", "metadata.json is missing")]
        except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            return None, [MetadataProblem("metadata.json", "", f"metadata.json is not valid JSON: {exc}")]
        metadata, problems = parse(text)
        return (cls(path, metadata), []) if metadata is not None else (None, problems)

    @classmethod
    def load(cls, path: Path) -> "BuiltVariant":
        """The variant at `path`, or one BuildError naming the file and the key."""
        built, problems = cls.read(path)
        if built is not None:
            return built
        first = problems[0]
        if first.code == "metadata.missing":
            raise BuildError("not a kernel variant (no metadata.json)", file=path,
                             hint="point to a build folder made by `kbuild build` or a Hub kernel repo")
        message = first.message.removeprefix("metadata.json: ")
        if first.code == "metadata.missing-key":
            message = "required key is missing"
        raise BuildError(message, file=path / METADATA, key=first.key or None)
