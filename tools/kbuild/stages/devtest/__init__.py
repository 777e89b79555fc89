"""The test stage (`kbuild dev`'s last step, and `kbuild test`): the project's own tests/ run by
pytest against one build, however they load the kernel, with every path of a built variant's
Python file in their output shown as the torch-ext/ file it was copied from (so a traceback
points at the source to edit).

Tests load the build they are given and nothing else: `get_kernel(repo_id, version=N)` callers
through `LOCAL_KERNELS` (the loader's own override, `repo=path[:repo2=path2]`: the manifest's
`general.hub.repo-id` mapped to `.kbuild/tested/<digest>`, a link to the one variant tested or a
folder of links to exactly the variants tested — never build/, where the loader could prefer a
leftover — other repositories' entries kept), and `import <module>` callers through a link
`.kbuild/import/<module>` on `PYTHONPATH`. `kbuild test` picks the variant as the loader in the
target interpreter would (`select_variant.py`); `--ci` is upstream's `ci-test`: the best variant
alone, `-m kernels_ci -p no:cacheprovider`, the variant's folder on `PYTHONPATH` too."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable

from ...core import manifest as manifest_mod
from ...core.built import variant_dirs
from ...core.errors import BuildError
from ...core.layout import METADATA, Layout
from ...core.runner import call, capture, marked_answer, stream

LOCAL_KERNELS = "LOCAL_KERNELS"
NO_TESTS_COLLECTED = 5  # pytest's exit status
CI_MARKER = "kernels_ci"  # kernels-community's selection for GPU runners (`pytest -m kernels_ci`)
CI_ARGS = ("-m", CI_MARKER, "-p", "no:cacheprovider")  # upstream's ci-test runs pytest with these
SELECT_MARKER = "KBUILD-SELECT "  # as resources/scripts/select_variant.py answers

# pytest options that need the terminal itself (a debugger, uncaptured output).
INTERACTIVE = ("--pdb", "--trace", "-s", "--capture=no")


@dataclass(frozen=True)
class TestTarget:
    """What one test run loads: variant folders of one build, for one interpreter."""

    project: Path
    build_dir: Path
    variants: tuple[Path, ...]  # the first is what `import <module>` gives
    repo_id: str | None         # general.hub.repo-id: what get_kernel callers name
    module: str
    ci: bool = False            # upstream's ci-test: `-m kernels_ci`, the variant on PYTHONPATH

    @property
    def local_path(self) -> Path:
        """Where LOCAL_KERNELS points the repo: `.kbuild/tested/<digest of the variants>`, a
        link to the one variant, or a folder of links to each (where the loader picks among
        them by backend); never the build folder, whose other variants it could prefer."""
        key = "\0".join(str(v) for v in self.variants).encode()
        return Layout.of(self.project).tested / hashlib.sha256(key).hexdigest()[:16]

    def shown(self, path: Path) -> str:
        return str(path.relative_to(self.project)) if path.is_relative_to(self.project) else str(path)

    def describe(self) -> str:
        """The one line said before the tests run."""
        ways = [f"import {self.module}"]
        if self.repo_id:
            ways.insert(0, f'get_kernel("{self.repo_id}") through {LOCAL_KERNELS}')
        folders = ", ".join(self.shown(v) for v in self.variants)
        return f"tests load {folders} ({'; '.join(ways)})"


def target(project: Path, build_dir: Path, variants: list[Path], ci: bool = False) -> TestTarget:
    general = manifest_mod.load(project, warn=lambda _: None).general
    return TestTarget(project.resolve(), build_dir.resolve(), tuple(v.resolve() for v in variants),
                      general.hub.repo_id, general.module_name, ci)


def select_variants(project: Path, build_dir: Path, python: str | None, *, ci: bool = False
                    ) -> TestTarget:
    """The variants of `build_dir` that the `kernels` loader in `python` would load, best first
    (`ci`: the best alone); where `kernels` is not installed there, the variant named for its
    torch and backend. `build_dir` may be one variant's folder: that variant, where the loader
    accepts it. Refuses (listing what is there, and why each does not fit) when none would
    load."""
    python = python or sys.executable
    one = (build_dir / METADATA).is_file()  # --build-dir build/<variant>
    root = build_dir.parent if one else build_dir
    present = [build_dir.name] if one else [d.name for d in variant_dirs(build_dir, built=True)]
    if not present:
        raise BuildError("no built variants to test", file=build_dir,
                         hint="run `kbuild build` first, or pass --build-dir")
    answer = _loader_choice(python, root)
    if "error" in answer:  # no kernels there: a variant given by its folder is taken as it is
        chosen, why = (present if one else _by_name(python, present)), {}
    else:
        chosen = [n for n in answer["chosen"] if n in present]
        why = answer["rejected"]
        if one and not chosen and build_dir.name not in why:  # a name the loader does not parse:
            chosen = present                                   # LOCAL_KERNELS at it loads it
    if not chosen:
        from ..torch_install import read_torch_install
        torch = read_torch_install(python)
        listing = "; ".join(f"{n}" + (f" ({why[n]})" if n in why else "") for n in present)
        raise BuildError(f"no variant in {build_dir} loads with torch {torch.torch_version} of "
                         f"{python}; there is: {listing}",
                         hint="build one for this torch (`kbuild build --python PY` or --env ENV), "
                              "or test with the interpreter the variants were built for")
    return target(project, root, [root / n for n in (chosen[:1] if ci else chosen)], ci=ci)


def _loader_choice(python: str, build_dir: Path) -> dict:
    """select_variant.py's answer in `python`: {"chosen": [...], "rejected": {...}} or
    {"error": ...}; anything else is refused in one line."""
    script = resources.files("kbuild") / "resources" / "scripts" / "select_variant.py"
    proc = capture([python, str(script), str(build_dir)], timeout=300)
    answer = marked_answer(proc.stdout, SELECT_MARKER)
    if answer is not None and isinstance(answer.get("error"), str):
        return answer
    if answer is None or not isinstance(answer.get("chosen"), list) \
            or not isinstance(answer.get("rejected"), dict):
        last = (proc.stderr.strip().splitlines() or ["it printed no answer"])[-1].strip()
        raise BuildError(f"{python} could not be asked which variant it loads (exit "
                         f"{proc.returncode}): {last[-300:]}",
                         hint="check that this interpreter runs and has torch")
    return answer


def _by_name(python: str, present: list[str]) -> list[str]:
    """Without `kernels` in the target: the variant named for its torch's own backend."""
    from ...core.backend import Backend
    from ..plan import variant_of
    from ..torch_install import read_torch_install
    torch = read_torch_install(python)
    backend = Backend.CUDA if torch.cuda else Backend.CPU
    names = [variant_of(torch, backend).name, f"torch-{backend.value}", "torch-universal"]
    return [n for n in names if n in present][:1]


def local_kernels(existing: str | None, repo_id: str, path: Path, where: str = LOCAL_KERNELS
                  ) -> str:
    """`LOCAL_KERNELS` with `repo_id` mapped to `path`, the user's entries for other
    repositories kept. The loader's own format (kernels' `_parse_local_kernel_overrides`):
    entries joined by `:`, each split at its first `=` into repo and path; so a path may hold
    `=` but not `:`."""
    if ":" in str(path):
        raise BuildError(f"{path} holds `:`, which {LOCAL_KERNELS} cannot carry (its entries are "
                         "joined by `:`)", hint="move the project to a path without `:`")
    entries = []
    for entry in (existing or "").split(":"):
        if not entry:
            continue
        if "=" not in entry:
            raise BuildError(f"{LOCAL_KERNELS} entry {entry!r} is not of the form repo=path",
                             key=where, hint="fix or unset LOCAL_KERNELS (format: "
                                             "org/name=/path/to/kernel[:org2/name2=/path2])")
        if entry.split("=", 1)[0] != repo_id:
            entries.append(entry)
    return ":".join([*entries, f"{repo_id}={path}"])


def check_local_kernels(project: Path) -> None:
    """Before anything is built or realised: the user's LOCAL_KERNELS reads as the loader reads
    it, and the path a test run maps the project's repo to can be carried in it."""
    repo_id = manifest_mod.load(project, warn=lambda _: None).general.hub.repo_id
    if repo_id:
        local_kernels(os.environ.get(LOCAL_KERNELS), repo_id, Layout.of(project).tested / "x")


def loading_env(tested: TestTarget, base: dict[str, str] | None = None,
                tools: list[Path] = ()) -> dict[str, str]:
    """The test process's environment: LOCAL_KERNELS and PYTHONPATH pointed at `tested` (and at
    `tools`, the tests' requirements the environment lacks), the links made. Every check comes
    before the first link: a refusal leaves nothing behind."""
    env = dict(os.environ if base is None else base)
    if tested.repo_id:
        env[LOCAL_KERNELS] = local_kernels(env.get(LOCAL_KERNELS), tested.repo_id,
                                           tested.local_path)
        _link_tested(tested)
    shim = Layout.of(tested.project).import_shim
    _replace_link(shim / tested.module, tested.variants[0])
    upstream = str(tested.variants[0]) if tested.ci else ""  # ci-test's PYTHONPATH=<variant>
    paths = (str(shim), upstream, *map(str, tools), env.get("PYTHONPATH", ""))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


def _replace_link(link: Path, to: Path) -> None:
    """`link` made a link to `to`, replaced atomically (a concurrent run never sees none)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    fresh = link.with_name(f".{link.name}.{os.getpid()}")  # a link, not core/files.write_atomic's one file
    fresh.unlink(missing_ok=True)
    fresh.symlink_to(to, target_is_directory=True)
    try:
        os.replace(fresh, link)
    except OSError as e:
        fresh.unlink(missing_ok=True)
        raise BuildError(f"{link} is in the way ({e.strerror or e}): kbuild keeps a link to the "
                         "variant under test there", file=link,
                         hint="remove it (kbuild makes it again)") from None


def _link_tested(tested: TestTarget) -> None:
    """tested.local_path: a link to the one variant, or a folder of links to each variant."""
    path = tested.local_path
    if len(tested.variants) == 1:
        _replace_link(path, tested.variants[0])
        return
    expected = {v.name: str(v) for v in tested.variants}

    def holds() -> bool:
        return path.is_dir() and not path.is_symlink() and expected == {
            c.name: os.readlink(c) if c.is_symlink() else None for c in path.iterdir()}

    if holds():
        return
    fresh = path.with_name(f".{path.name}.{os.getpid()}")
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    for variant in tested.variants:
        (fresh / variant.name).symlink_to(variant, target_is_directory=True)
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir() and not holds():  # a damaged copy (only kbuild writes here)
        shutil.rmtree(path)
    try:  # a whole folder renamed into place, not core/files.write_atomic's one file
        os.rename(fresh, path)
    except OSError:  # another run made the same folder meanwhile
        shutil.rmtree(fresh, ignore_errors=True)
        if not holds():
            raise


def source_map(project: Path, build_dir: Path) -> dict[str, str]:
    """Python files of built variants (and of the import link) → the torch-ext/ files they were
    copied from, as absolute paths and as paths relative to the project (how pytest prints
    them)."""
    module = manifest_mod.load(project, warn=lambda _: None).general.module_name
    layout = Layout.of(project)
    package = layout.module_dir(module)
    mapping: dict[str, str] = {}
    roots = variant_dirs(build_dir, built=True)
    link = layout.import_shim / module
    if link.is_symlink() and (link / METADATA).is_file():
        roots.append(link)
    for tested in layout.tested.iterdir() if layout.tested.is_dir() else ():  # LOCAL_KERNELS's
        if (tested / METADATA).is_file():      # a link to the one variant tested
            roots.append(tested)
        elif tested.is_dir():                  # a folder of links, one per variant
            roots += variant_dirs(tested, built=True)
    for variant in roots:
        for built in variant.rglob("*.py*"):
            source = package / built.relative_to(variant)
            if built.suffix in (".py", ".pyi") and source.is_file():
                mapping[str(built)] = str(source)
                if built.is_relative_to(project):
                    mapping[str(built.relative_to(project))] = str(source.relative_to(project))
    return mapping


def path_rewriter(mapping: dict[str, str]) -> Callable[[str], str]:
    """A function that rewrites every mapped path in a line of output."""
    if not mapping:
        return lambda line: line
    pattern = re.compile("|".join(re.escape(k) for k in sorted(mapping, key=len, reverse=True)))
    return lambda line: pattern.sub(lambda m: mapping[m.group(0)], line)


def pytest_args(project: Path) -> list[str]:
    """pytest's rootdir, configuration file and conftest search pinned to the project: its own
    configuration (in tests/ or the project folder, as pytest would look for it) when it has one,
    else none; never a parent folder's pytest.ini, pyproject.toml or conftest.py."""
    import configparser
    import tomllib

    def configures_pytest(path: Path) -> bool:
        if not path.is_file():
            return False
        if path.name in ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini"):
            return True
        try:
            if path.name == "pyproject.toml":
                return "pytest" in tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {})
            parser = configparser.ConfigParser(interpolation=None)
            parser.read(path, encoding="utf-8")
        except (OSError, ValueError, configparser.Error):  # pytest will say what is wrong
            return True
        return parser.has_section("pytest" if path.name == "tox.ini" else "tool:pytest")

    names = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml",
             "tox.ini", "setup.cfg")
    config = next((folder / name for folder in (project / "tests", project) for name in names
                   if configures_pytest(folder / name)), None)
    args = ["--rootdir", str(project), "-c", str(config or os.devnull), "--confcutdir", str(project)]
    if config is None:  # kernels-community's CI marker, known without a configuration of its own
        args += ["-o", f"markers={CI_MARKER}: the cheap tests CI runs on a GPU runner"]
    return args


def has_tests(project: Path) -> bool:
    return (project / "tests").is_dir()


def require_tests(project: Path) -> None:
    """Refused before anything is built or realised: there is nothing to run."""
    if not has_tests(project):
        raise BuildError("no tests/ folder", file=project, hint="add pytest tests under tests/")


def run_tests(project: Path, python: str | None, args: list[str], *, write: Callable[[str], None],
              color: bool = False, tested: TestTarget | None = None, tools: list[Path] = (),
              env: dict[str, str] | None = None) -> int:
    """pytest on `project/tests` in the target interpreter, loading `tested` (see the module's
    docstring; `env`: its loading_env, when the caller made it first); its output, paths
    rewritten, goes to `write` line by line (an interactive run, `--pdb`, has the terminal).
    Returns pytest's exit status."""
    ci = list(CI_ARGS) if tested is not None and tested.ci else []
    cmd = [python or sys.executable, "-m", "pytest", str(project / "tests"), "-q",
           *pytest_args(project), *ci, *args]
    if env is None and tested is not None:
        env = loading_env(tested, tools=tools)
    if any(a in INTERACTIVE for a in args):
        return call(cmd, cwd=project, env=env)
    if color and not any(a.startswith("--color") for a in args):
        cmd.append("--color=yes")
    build_dir = tested.build_dir if tested is not None else Layout.of(project).build_dir
    rewrite = path_rewriter(source_map(project, build_dir))
    return stream(cmd, lambda line: write(rewrite(line)), cwd=project, env=env,
                  lets_child_stop=True)


def status_words(code: int, args: list[str], ci: bool = False) -> str | None:
    """What a pytest exit status means, where the output alone may not say it."""
    if code == NO_TESTS_COLLECTED and ci:
        return (f"no test is marked {CI_MARKER} (pytest exit 5): as in upstream's ci-test, "
                "that counts as success")
    if code == NO_TESTS_COLLECTED:
        selection = " ".join(args)
        return ("no tests collected (pytest exit 5)" + (f" with `{selection}`" if selection else "")
                + ": nothing matched, or every test module skipped itself at import (`-rs` "
                  "prints why); e.g. `-m kernels_ci` selects only tests marked "
                  "@pytest.mark.kernels_ci, and this project may mark none")
    return None
