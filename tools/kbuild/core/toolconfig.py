"""`[tool.kbuild]` of pixi.toml, typed: the builder's own settings there, read in one place.

    [tool.kbuild.pypi]           the PyPI path's toolkit wheels by CUDA major (`toolkit`), and
                                 why a major has none (`no-toolkit`)          (matrix/matrix.py)
    [tool.kbuild.update]         `index`: where `kbuild matrix update` reads torch releases
    [tool.kbuild.signing]        whose signatures `kbuild verify` trusts: `repository`, `workflows`
    [tool.kbuild.ci.containers]  CI build images pinned by digest, by CUDA version (matrix/ci.py)

A key of the wrong shape (`tool = 5` included) is one BuildError naming pixi.toml and the key.
What a value must be beyond its type (a GitHub OWNER/NAME, an image pinned by digest) is checked
where it is used, with the messages below.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import BuildError

KEY = "tool.kbuild"
REPOSITORY_HINT = "pass --repository OWNER/NAME or set it in [tool.kbuild.signing] of pixi.toml"
IMAGE_HINT = ("NAME:TAG@sha256:<64 hex>; `docker buildx imagetools inspect NAME:TAG` prints the "
              "digest")
CONTAINERS_HINT = 'e.g. "12.8" = "nvidia/cuda:12.8.1-devel-ubuntu24.04@sha256:<64 hex>"'


class _Table(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True, populate_by_name=True)


class Pypi(_Table):
    toolkit: dict[str, list[str]] = Field(default_factory=dict)  # "12" → ["nvidia-…=={cuda}.*"]
    no_toolkit: dict[str, str] = Field(default_factory=dict, alias="no-toolkit")


class Update(_Table):
    index: str | None = None


class Signing(_Table):
    repository: str | None = None
    workflows: list[str] = Field(default_factory=list)


class Ci(_Table):
    containers: dict[str, str] = Field(default_factory=dict)


class KbuildTool(_Table):
    pypi: Pypi = Field(default_factory=Pypi)
    update: Update = Field(default_factory=Update)
    signing: Signing = Field(default_factory=Signing)
    ci: Ci = Field(default_factory=Ci)


# A value of the wrong type, where its user said so in its own words before this reader existed:
# (message, hint) by the key's place under [tool.kbuild] (`*`: any key of that table).
_WORDS: dict[tuple[str, ...], Callable[[Any], tuple[str, str | None]]] = {
    ("signing", "repository"): lambda v: (f"{v!r} is not a GitHub OWNER/NAME", REPOSITORY_HINT),
    ("signing", "workflows"): lambda v: ("must be a list of workflow strings", None),
    ("ci", "containers"): lambda v: ("expected a table of CUDA versions", CONTAINERS_HINT),
    ("ci", "containers", "*"): lambda v: (f"{v!r} is not an image pinned by digest", IMAGE_HINT),
}
_SHAPES = {"model_type": "a table", "dict_type": "a table", "list_type": "a list",
           "string_type": "a string"}


def _value(table: Any, loc: tuple[str, ...]) -> Any:
    for part in loc:
        table = table.get(part) if isinstance(table, dict) else None
    return table


def _error(err: dict, table: dict, file: Path) -> BuildError:
    loc = tuple(str(p) for p in err["loc"])
    if loc[:2] == ("signing", "workflows"):  # the list, or one of its items
        loc = loc[:2]
    words = _WORDS.get(loc) or _WORDS.get((*loc[:-1], "*"))
    message, hint = (words(_value(table, loc)) if words else
                     (f"must be {_SHAPES.get(err['type'], 'of another type')}", None))
    return BuildError(message, file=file, key=".".join((KEY, *loc)), hint=hint)


def tool_settings(raw: dict[str, Any], file: Path) -> KbuildTool:
    """The `[tool.kbuild]` table of a parsed pixi.toml (`file`), typed; defaults where absent."""
    table: Any = raw
    parts = KEY.split(".")
    for depth, part in enumerate(parts, 1):  # tool, kbuild
        table = table.get(part, {})
        if not isinstance(table, dict):
            raise BuildError("must be a table", file=file, key=".".join(parts[:depth]))
    try:
        return KbuildTool.model_validate(table)
    except ValidationError as e:
        raise _error(e.errors()[0], table, file) from None


def read_tool_settings(file: Path) -> KbuildTool:
    """`tool_settings` of the pixi.toml at `file` (defaults when there is none)."""
    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BuildError(f"not valid TOML: {exc}", file=file) from None
    return tool_settings(raw, file)
