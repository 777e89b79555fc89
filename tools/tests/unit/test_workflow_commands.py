"""Every `kbuild` call in a workflow we write or run uses a command and options that exist.

The workflows' steps run only on GitHub, where nothing here can run them; actionlint checks the
shell, not our CLI. So each `run:` script of the generated workflows (one project, monorepo)
and of this repository's own is read for `kbuild COMMAND ... --option`, options held in a bash
array the call expands included, and each is looked up in the Typer app's commands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main
import yaml

from kbuild.cli import app
from kbuild.workflows import writer

REPO = Path(__file__).resolve().parents[3]
CALL = re.compile(r"\bkbuild\s+([a-z][\w-]*)(?:\s+([a-z][\w-]*))?")
OPTION = re.compile(r"(?<![\w$/.-])(--?[A-Za-z][\w-]*)")
ARRAY = re.compile(r"\"\$\{(\w+)\[@\]\}\"")


def scripts(text: str) -> list[str]:
    """The `run:` scripts of a workflow."""
    found: list[str] = []
    for job in (yaml.safe_load(text).get("jobs") or {}).values():
        found += [s["run"] for s in job.get("steps", []) if "run" in s]
    return found


def logical_lines(script: str) -> list[str]:
    """The script's lines, continuations joined, comments dropped."""
    lines, current = [], ""
    for raw in script.splitlines():
        line = raw.strip()
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        lines.append(current + line)
        current = ""
    return lines


def calls(script: str) -> list[tuple[list[str], set[str]]]:
    """Each `kbuild` call: its command words and the options it passes (through arrays too)."""
    lines = logical_lines(script)
    arrays: dict[str, set[str]] = {}
    for line in lines:
        for name, body in re.findall(r"\b(\w+)\+?=\((.*?)\)", line):
            arrays.setdefault(name, set()).update(OPTION.findall(body))
    found = []
    for line in lines:
        for match in CALL.finditer(line):
            rest = line[match.end():].split("|")[0].split("&&")[0].split(";")[0]
            options = set(OPTION.findall(rest))
            for name in ARRAY.findall(rest):
                options |= arrays.get(name, set())
            words = [w for w in match.groups() if w]
            found.append((words, options))
    return found


def command_options(words: list[str]) -> tuple[list[str], set[str]]:
    """The command the words name (a group's subcommand when there is one) and its options."""
    command = typer.main.get_command(app)
    used = []
    for word in words:
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            break
        command, used = sub, used + [word]
    assert used, f"kbuild {' '.join(words)}: no such command"
    options = {"--help"}
    for param in command.params:
        options.update(param.opts + param.secondary_opts)
    return used, options


def workflows() -> dict[str, str]:
    texts = {"one project (kbuild init, ci-workflow)": writer.project_workflow(),
             "monorepo (ci-workflow --monorepo)": writer.monorepo_workflow("acme")}
    for path in sorted((REPO / ".github" / "workflows").glob("*.y*ml")):
        texts[f"this repository's {path.name}"] = path.read_text()
    return texts


@pytest.mark.parametrize("name", list(workflows()))
def test_every_kbuild_call_uses_a_command_and_options_that_exist(name):
    seen = 0
    for script in scripts(workflows()[name]):
        for words, options in calls(script):
            command, known = command_options(words)
            unknown = options - known
            assert not unknown, f"{name}: `kbuild {' '.join(command)}` has no {sorted(unknown)}"
            seen += 1
    assert seen, f"{name}: no kbuild call found (the reader would prove nothing)"


def test_the_reader_finds_options_in_arrays_and_refuses_unknown_ones():
    script = ('t=()\nif x; then t+=(--repo-id "$R"); fi\n'
              'kbuild upload . --repo-type kernel "${t[@]}" \\\n  --output-json o.json | tee x\n'
              'kbuild test . --env "$E" --ci\n')
    (upload, upload_options), (test, test_options) = calls(script)
    assert upload == ["upload"] and upload_options == {"--repo-type", "--repo-id", "--output-json"}
    assert test == ["test"] and test_options == {"--env", "--ci"}
    _, known = command_options(["upload"])
    assert {"--repo-type", "-q", "--quiet", "--create-pr"} <= known
    assert "--no-such-flag" not in known
    _, known = command_options(["matrix", "update"])
    assert "--matrix" in known
