"""The public API of a build against what the Hub's version branch holds (`kbuild upload`'s
guard, `kbuild api-diff`).

Users pin `version=N`, and every upload of version N replaces branch `vN` in place, so a public
name removed or changed incompatibly under the same version breaks them. The API of a variant is
what its real load reports (resources/scripts/probe_variant.py, remembered with the load by
stages/check/probe_memo.py), one dict per symbol: the package's public names and those of its public
submodules, each callable with its signature, defaults and the flags `kernels.kernelize` reads,
each constant with its value; the layer classes with their `forward` and flags; and the
registered op schemas. Each uploaded variant is compared with the API recorded for the variant
of the same name when it was uploaded to the branch (`api/<variant>.json`; the branch's code is
never run); a variant this machine cannot load, that the branch does not hold yet, or whose
files on the branch have no record of their API, is not compared (said so). Within a compared
variant, what a record lacks (one made by an older kbuild) or holds only as a type (a value that
is not a plain constant) is named in one "not compared" line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..core.built import BuiltVariant
from ..core.errors import BuildError
from ..core.layout import MANIFEST, SIGNATURE
from ..stages.check import probe_load
from .hub import HubClient
from .refs import hub_branch, hub_repo
from .sync import git_blob_oid

Log = Callable[[str], None]
POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
VARIADIC = ("VAR_POSITIONAL", "VAR_KEYWORD")
NOT_COMPARED = "not compared"
SECTIONS = ("python", "submodules", "layers", "ops")
CALLABLE = ("function", "class", "layer")
# The flags kernels.kernelize reads of a layer class, or of a function it wraps as a layer, with
# its defaults (recorded for layers and functions, as the probe reads them).
KERNELIZE = {"has_backward": True, "can_torch_compile": False}


@dataclass(frozen=True)
class Change:
    variant: str
    symbol: str           # "function img2gray_out", "op img2gray", "layer RMSNorm"
    change: str           # added | removed | changed | not compared
    breaking: bool
    old: str | None = None
    new: str | None = None
    detail: str = ""      # what changed that the texts do not show; why it was not compared

    def line(self) -> str:
        if self.change == NOT_COMPARED:
            return f"? {self.variant}: not compared: {self.symbol} ({self.detail})"
        mark = "-" if self.change == "removed" else "+" if self.change == "added" else "~"
        if self.change == "changed" and self.old == self.new and self.detail:
            changed = f"{self.symbol} changed: {self.detail}"
        else:
            changed = f"{self.symbol} changed from `{self.old}` to `{self.new}`" + (
                f" ({self.detail})" if self.detail else "")
        text = {"removed": f"{self.symbol} removed", "added": f"{self.symbol} added"}.get(
            self.change, changed)
        if self.change == "removed" and self.old:
            text += f" (was `{self.old}`)"
        if self.change == "added" and self.new:
            text += f": `{self.new}`"
        verdict = " [incompatible]" if self.breaking else ""
        return f"{mark} {self.variant}: {text}{verdict}"


@dataclass
class ApiReport:
    branch: str
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def breaking(self) -> list[Change]:
        return [c for c in self.changes if c.breaking]


# ----------------------------------------------------------------------------- comparison


def params_compatible(old: list, new: list) -> bool:
    """Whether every call valid against `old` parameters still is against `new`: the same
    positional parameters in the same order (by name, unless positional-only), keyword-only ones
    kept, no default taken away, no required parameter added, *args/**kwargs kept."""
    old_pos = [p for p in old if p[1] in POSITIONAL]
    new_pos = [p for p in new if p[1] in POSITIONAL]
    if len(new_pos) < len(old_pos):
        return False
    for o, n in zip(old_pos, new_pos):
        renamed = o[1] == "POSITIONAL_OR_KEYWORD" and (n[1], n[0]) != (o[1], o[0])
        if renamed or (o[2] and not n[2]):
            return False
    by_name = {p[0]: p for p in new}
    for o in old:
        if o[1] == "KEYWORD_ONLY":
            n = by_name.get(o[0])
            if (n is None or n[1] not in ("KEYWORD_ONLY", "POSITIONAL_OR_KEYWORD")
                    or (o[2] and not n[2])):
                return False
        if o[1] in VARIADIC and not any(p[1] == o[1] for p in new):
            return False
    known = {p[0] for p in old}
    extra_pos = new_pos[len(old_pos):]
    extra_kw = [p for p in new if p[1] == "KEYWORD_ONLY" and p[0] not in known]
    return all(p[2] for p in extra_pos + extra_kw)


def _split_args(text: str) -> list[str]:
    args, depth, current = [], 0, ""
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            args.append(current.strip())
            current = ""
        else:
            current += ch
    return [a for a in args + [current.strip()] if a]


def schema_compatible(old: str, new: str) -> bool:
    """An op schema `name(args) -> returns` still accepts every call of the old one: the same
    returns, the old arguments unchanged and in order, and only arguments with a default added."""
    def parts(schema: str) -> tuple[list[str], str] | None:
        m = re.fullmatch(r"[^(]*\((.*)\)\s*->\s*(.*)", schema.strip())
        return (_split_args(m[1]), m[2].strip()) if m else None
    o, n = parts(old), parts(new)
    if o is None or n is None or o[1] != n[1] or n[0][:len(o[0])] != o[0]:
        return old == new
    return all("=" in a for a in n[0][len(o[0]):] if a != "*")


# Why something was not compared, and the parts of a record it concerns (in the order said).
OLDER, NEWER = "the earlier API record predates them", "the new API record lacks them"
OPAQUE = "not plain constants: only their type is compared"
UNREADABLE = "no readable signature"
SUBMODULES, SIGNATURES, DEFAULTS, FLAGS, VALUES = (
    "public submodules", "the signatures of", "the defaults of", "the kernelize flags of",
    "the values of")
FACETS = (SUBMODULES, SIGNATURES, DEFAULTS, FLAGS, VALUES)
LISTED = 10  # symbols named per part of a "not compared" line


class _Gaps:
    """What two records did not let `compare` compare, by reason."""

    def __init__(self) -> None:
        self.found: dict[str, dict[str, list[str]]] = {}

    def add(self, reason: str, facet: str, symbol: str | None = None) -> None:
        symbols = self.found.setdefault(reason, {}).setdefault(facet, [])
        if symbol is not None and symbol not in symbols:
            symbols.append(symbol)

    def both_have(self, key: str, old: dict, new: dict, facet: str, symbol: str) -> bool:
        """Whether both records have `key`; if not, the gap is noted with which one lacks it."""
        if key in old and key in new:
            return True
        self.add(OLDER if key not in old else NEWER, facet, symbol)
        return False

    def changes(self, variant: str) -> list[Change]:
        out = []
        for reason in (OLDER, NEWER, OPAQUE, UNREADABLE):
            facets = self.found.get(reason)
            if not facets:
                continue
            parts = []
            for facet in (f for f in FACETS if f in facets):
                symbols = facets[facet]
                more = f" and {len(symbols) - LISTED} more" if len(symbols) > LISTED else ""
                parts.append(f"{facet} {', '.join(symbols[:LISTED])}{more}" if symbols else facet)
            out.append(Change(variant, "; ".join(parts), NOT_COMPARED, False, detail=reason))
        return out


def _text(name: str, entry: dict, other: dict | None = None) -> str:
    """How a symbol is shown; a value by its type where either record lacks its value."""
    if entry.get("kind") == "value":
        shown = entry.get("value")
        if shown is None or (other is not None and other.get("value") is None):
            return f"{name}: {entry.get('type', '')}"
        return f"{name} = {shown}"
    return name + (entry.get("signature") or entry.get("type") or "")


def _entry_verdict(symbol: str, old: dict, new: dict, gaps: _Gaps) -> tuple[bool, str]:
    """Whether every use of the `old` record of a symbol still works with the `new` one, and
    what changed that its text does not show; what cannot be compared goes to `gaps`."""
    if old.get("kind") != new.get("kind"):
        return False, ""
    kind, ok, detail = old.get("kind"), True, []
    if kind == "value":
        ok = old.get("type") == new.get("type")
        if ok and gaps.both_have("value", old, new, VALUES, symbol):
            if old["value"] is None or new["value"] is None:
                gaps.add(OPAQUE, VALUES, symbol)
            else:
                ok = old["value"] == new["value"]
        return ok, ""
    if kind not in CALLABLE:
        return old.get("type") == new.get("type"), ""
    if "params" in old and "params" in new:
        ok = params_compatible(old["params"], new["params"])
        if gaps.both_have("defaults", old, new, DEFAULTS, symbol):
            for name, was in old["defaults"].items():
                now = new["defaults"].get(name, was)  # a default taken away: params say so
                if was is None or now is None:
                    gaps.add(OPAQUE, VALUES, f"{symbol}({name}=…)")
                elif was != now:
                    ok = False
    elif "params" in old:
        ok = False  # the new one's signature cannot be read: no call can be shown to work
    else:
        gaps.add(UNREADABLE, SIGNATURES, symbol)
    if kind != "class" and gaps.both_have("kernelize", old, new, FLAGS, symbol):
        for flag, default in KERNELIZE.items():
            was, now = old["kernelize"].get(flag, default), new["kernelize"].get(flag, default)
            if not isinstance(was, bool) or not isinstance(now, bool):
                gaps.add(OPAQUE, FLAGS, symbol)
            elif was != now:
                detail.append(f"{flag} from {was} to {now}")
                ok = ok and now  # kernelize stops using a layer that loses one
    return ok, "; ".join(detail)


def compare(variant: str, old: dict, new: dict) -> list[Change]:
    """The changes from the API `old` to `new` (as the probe records them), breaking or not,
    and one "not compared" change per reason something could not be compared."""
    changes: list[Change] = []
    gaps = _Gaps()
    sections = [s for s in SECTIONS if s in old and s in new]
    if "submodules" not in sections:
        gaps.add(OLDER if "submodules" not in old else NEWER, SUBMODULES)
    for section in sections:
        before, after = old.get(section) or {}, new.get(section) or {}
        for name in sorted(before.keys() | after.keys()):
            b, a = before.get(name), after.get(name)
            if section == "ops":
                label, b_text, a_text = f"op {name}", b, a
            else:
                label = f"{(a or b).get('kind', 'name')} {name}"
                b_text = _text(name, b, a) if b else None
                a_text = _text(name, a, b) if a else None
            if b is None:
                changes.append(Change(variant, label, "added", False, None, a_text))
            elif a is None:
                changes.append(Change(variant, label, "removed", True, b_text, None))
            elif section == "ops":
                ok = schema_compatible(b, a)
                if b != a:
                    changes.append(Change(variant, label, "changed", not ok, b_text, a_text))
            else:
                symbol = f"layer {name}" if section == "layers" else name
                ok, detail = _entry_verdict(symbol, b, a, gaps)
                if b != a and (b_text != a_text or not ok or detail):
                    changes.append(Change(variant, label, "changed", not ok, b_text, a_text,
                                          detail))
    return changes + gaps.changes(variant)


# ----------------------------------------------------------------------------- against the Hub
#
# The branch's copy of a variant is never loaded (its code would run here, with this job's
# secrets): each upload records the API of every variant it uploads, read from the load of the
# LOCAL build, in `api/<variant>.json` beside `build/` on the branch, with the git blob ids of the
# files it describes. The next upload compares its own build's API with that record, when the
# record describes the files the branch holds; otherwise the variant is not compared (said so).

RECORDS = "api"             # the records' folder on a branch (nothing else reads it)
RECORD_FORMAT = "kbuild-api/1"
MAX_RECORD_BYTES = 1 << 20  # a bigger record is not read


def record_path(variant: str) -> str:
    return f"{RECORDS}/{variant}.json"


def _oids(variant: BuiltVariant) -> dict[str, str]:
    """Git blob ids of what ships, by path in the variant, but the signature (it changes with
    every signing)."""
    return {p.relative_to(variant.path).as_posix(): git_blob_oid(p) for p in variant.files()
            if p.relative_to(variant.path).as_posix() != SIGNATURE}


def local_apis(variants: list[BuiltVariant], python: str | None = None) -> dict[str, dict | str]:
    """Each variant's API as its load here reports it (stages/check/__init__.py: a process without this
    environment's secrets, with a time limit; remembered with the load), or why there is none."""
    apis: dict[str, dict | str] = {}
    for v in variants:
        result = probe_load(v.path, python, v.metadata.id or "")
        if not result["loadable"]:
            apis[v.name] = f"cannot load it here ({result['reason']})"
        elif not result.get("api"):
            apis[v.name] = f"its load did not report it ({result.get('api_error') or 'unknown'})"
        else:
            apis[v.name] = result["api"]
    return apis


def api_record(variant: BuiltVariant, api: dict) -> bytes:
    """`api/<variant>.json`: the API of exactly these files (same API, same files: same bytes)."""
    doc = {"format": RECORD_FORMAT, "variant": variant.name, "files": _oids(variant), "api": api}
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def _read_record(data: bytes, variant: str) -> dict:
    """The record's fields, or ValueError saying why it is not one."""
    doc = json.loads(data)
    if not isinstance(doc, dict) or doc.get("format") != RECORD_FORMAT:
        raise ValueError(f"not a {RECORD_FORMAT} record")
    if doc.get("variant") != variant or not isinstance(doc.get("files"), dict) \
            or not isinstance(doc.get("api"), dict):
        raise ValueError("its variant, files or api is missing or of the wrong shape")
    return doc


def api_report(hub: HubClient, branch: str, variants: list[BuiltVariant],
               apis: dict[str, dict | str]) -> ApiReport:
    """Each variant's API (`apis`, from local_apis) against the record of the same variant on
    `branch` of the Hub repo. Reads only, and never the branch's code."""
    from huggingface_hub import RepoFile

    report = ApiReport(branch)
    head = hub.call("reading refs", hub.branches).get(branch) if hub.exists() else None
    if head is None:
        report.notes.append(f"{hub.repo_id} has no branch {branch} yet: no API to compare with")
        return report
    folders = [f"build/{v.name}" for v in variants] + [RECORDS]
    remote = hub.call(f"listing {branch}", lambda: hub.entries(head, folders))
    for v in variants:
        prefix = f"build/{v.name}/"
        theirs = {p[len(prefix):]: e.blob_id for p, e in remote.items()
                  if p.startswith(prefix) and not p.endswith(f"/{SIGNATURE}")}
        if not theirs:
            report.notes.append(f"{v.name}: new on {branch}, nothing to compare with")
            continue
        if theirs == _oids(v):
            continue  # the branch holds these very files
        record = remote.get(record_path(v.name))
        why = None
        if not isinstance(record, RepoFile):
            why = "no API record"
        elif record.size > MAX_RECORD_BYTES:
            why = f"its API record is {record.size} bytes, over {MAX_RECORD_BYTES}"
        elif isinstance(apis.get(v.name), str):
            why = str(apis[v.name])
        if why:
            report.notes.append(f"{v.name}: API not compared ({why})")
            continue
        try:
            doc = _read_record(hub.read_file(head, record_path(v.name), MAX_RECORD_BYTES), v.name)
            if doc["files"] != theirs:
                report.notes.append(f"{v.name}: API not compared (its API record on {branch} "
                                    "describes other files than the branch holds: uploaded by "
                                    "another tool since?)")
                continue
            changes = compare(v.name, doc["api"], apis[v.name])  # type: ignore[arg-type]
        except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as exc:
            # JSON of another shape than a record, however deep or odd: data, said so
            report.notes.append(f"{v.name}: API not compared (its API record on {branch} is "
                                f"unreadable: {type(exc).__name__}: {str(exc)[:200]})")
            continue
        report.changes += changes
    return report


def guard(report: ApiReport, *, project: Path, version: int, allow: bool, log: Log,
          warn: Log) -> None:
    """Stops an upload that would change version `version`'s API incompatibly (exit 2), naming
    each symbol, unless `allow`."""
    for note in report.notes:
        log(f"api: {note}")
    for change in report.changes:
        (warn if change.breaking else log)(f"api: {change.line()}")
    breaking = report.breaking
    if not breaking or allow:
        return
    names = "; ".join(f"{c.variant}: {c.symbol} {c.change}" for c in breaking[:5])
    more = f" and {len(breaking) - 5} more" if len(breaking) > 5 else ""
    raise BuildError(f"this upload would break the public API of version {version} on "
                     f"{report.branch} ({names}{more}); nothing was written",
                     file=project / MANIFEST, key="general.version",
                     hint=f"users pinned to version={version} would get it: bump general.version "
                          "(a new branch), or pass --allow-api-change")


def api_diff(project: Path, *, repo_id: str | None = None, build_dir: Path | None = None,
             python: str | None = None, endpoint: str | None = None,
             warn: Log = print) -> ApiReport:
    """`kbuild api-diff`: the build's API against branch v<version> (or [general.hub] branch)."""
    from ..core import manifest as manifest_mod
    from ..core.layout import Layout
    from ..core.built import variant_dirs
    manifest = manifest_mod.load(project, warn=warn)
    general = manifest.general
    repo_id = hub_repo(project, general, repo_id, purpose="compare with")
    build_dir = Layout.of(project, build_dir).build_dir
    variants = [v for v, _ in map(BuiltVariant.read, variant_dirs(build_dir) if build_dir.is_dir()
                                  else []) if v is not None]
    if not variants:
        raise BuildError("no readable variants", file=build_dir, hint="run `kbuild build` first")
    hub = HubClient(repo_id, endpoint=endpoint, token=None, log=warn, retries=2, backoff=0.5)
    return api_report(hub, hub_branch(general, None), variants, local_apis(variants, python))
