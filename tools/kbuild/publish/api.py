"""The public API of a build against what the Hub's version branch holds (`kbuild upload`'s
guard, `kbuild api-diff`).

Users pin `version=N`, and every upload of version N replaces branch `vN` in place, so a public
name removed or changed incompatibly under the same version breaks them. The API of a variant is
what its real load reports (resources/scripts/probe_variant.py, remembered with the load by
stages/probe_memo.py): the package's public names with their signatures, the layer classes with
their `forward`, and the registered op schemas. Each uploaded variant is compared with the API
recorded for the variant of the same name when it was uploaded to the branch (`api/<variant>.json`;
the branch's code is never run); a variant this machine cannot load, that the branch does not hold
yet, or whose files on the branch have no record of their API, is not compared (said so).
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
from .sync import git_blob_oid

Log = Callable[[str], None]
POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
VARIADIC = ("VAR_POSITIONAL", "VAR_KEYWORD")


@dataclass(frozen=True)
class Change:
    variant: str
    symbol: str           # "function img2gray_out", "op img2gray", "layer RMSNorm"
    change: str           # added | removed | changed
    breaking: bool
    old: str | None = None
    new: str | None = None

    def line(self) -> str:
        mark = "-" if self.change == "removed" else "+" if self.change == "added" else "~"
        text = {"removed": f"{self.symbol} removed", "added": f"{self.symbol} added"}.get(
            self.change, f"{self.symbol} changed from `{self.old}` to `{self.new}`")
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


def _text(entry: dict) -> str:
    return entry.get("signature") or entry.get("type") or ""


def _entry_compatible(old: dict, new: dict) -> bool:
    if old.get("kind") != new.get("kind"):
        return False
    if "params" in old:
        return "params" in new and params_compatible(old["params"], new["params"])
    return old.get("type") == new.get("type")


def compare(variant: str, old: dict, new: dict) -> list[Change]:
    """The changes from the API `old` to `new` (as the probe reports them), breaking or not."""
    changes: list[Change] = []
    for section in ("python", "layers", "ops"):
        before, after = old.get(section) or {}, new.get(section) or {}
        for name in sorted(before.keys() | after.keys()):
            b, a = before.get(name), after.get(name)
            if section == "ops":
                label = f"op {name}"
                b_text, a_text = b, a
            else:
                label = f"{(a or b).get('kind', 'name')} {name}"
                b_text = f"{name}{_text(b)}" if b else None
                a_text = f"{name}{_text(a)}" if a else None
            if b is None:
                changes.append(Change(variant, label, "added", False, None, a_text))
            elif a is None:
                changes.append(Change(variant, label, "removed", True, b_text, None))
            elif b != a:
                ok = schema_compatible(b, a) if section == "ops" else _entry_compatible(b, a)
                if b_text != a_text or not ok:
                    changes.append(Change(variant, label, "changed", not ok, b_text, a_text))
    return changes


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
    """Each variant's API as its load here reports it (stages/check.py: a process without this
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
    from ..stages.check import variant_dirs
    manifest = manifest_mod.load(project, warn=warn)
    general = manifest.general
    repo_id = repo_id or general.hub.repo_id
    if not repo_id:
        raise BuildError("no repo id to compare with", file=project / MANIFEST,
                         key="general.hub.repo-id", hint="set it in build.toml or pass --repo-id")
    build_dir = Layout.of(project, build_dir).build_dir
    variants = [v for v, _ in map(BuiltVariant.read, variant_dirs(build_dir) if build_dir.is_dir()
                                  else []) if v is not None]
    if not variants:
        raise BuildError("no readable variants", file=build_dir, hint="run `kbuild build` first")
    hub = HubClient(repo_id, endpoint=endpoint, token=None, log=warn, retries=2, backoff=0.5)
    return api_report(hub, general.hub.branch or f"v{general.version}", variants,
                      local_apis(variants, python))
