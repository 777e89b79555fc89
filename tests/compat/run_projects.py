"""Build a folder of kernel-builder projects with kbuild and run each one's own tests against
its build, the way a kernel author who switches builders would.

    python tests/compat/run_projects.py PROJECTS [NAME ...] [--env ENV] [--cuda-capabilities C]
        [--parallel N] [--check] [--no-tests] [--expected FILE] [--work DIR] [--out DIR]

Each project (a folder of PROJECTS with a build.toml) is copied into --work and built with
`kbuild build` for this interpreter's torch, or for the matrix environment --env (realised from
PyPI, e.g. torch214-cu130 on a machine without a GPU). Its tests then run with pytest in the
project folder, seeing the build both ways upstream's tests load it: `LOCAL_KERNELS` maps the
manifest's `general.hub.repo-id` to the project (for `kernels.get_kernel` callers), and a folder
on `PYTHONPATH` holds the variant under its module name (for `import <module>` callers).

Outcomes: build `built`, `refused` (kbuild's one-line reason), `compile-error` (the first
compiler error), `timeout`; tests `passed`, `failed`, `no-tests`, `not-run` (no GPU, or
--no-tests); a test module that cannot import a third-party package is reported as a missing
test dependency, not as a failure. With --expected (default: community.toml beside this file,
when it names the project) each result is compared with the expected one; the exit status is 1
when any differs. Tests run with this interpreter's torch: not for --env builds (check them
with --check instead), and for a CUDA build only where a GPU is visible. Results: DIR/projects.json and DIR/projects.md (--out, default --work).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
EXPECTED = HERE / "community.toml"
MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")
COMPILER_ERROR = re.compile(r"(error:|error \(|fatal error|multiple definition|undefined reference"
                            r"|#error|FAILED:)", re.I)


DEADLINE: float | None = None  # time.monotonic() by which everything must have ended


def limit(seconds: float) -> float:
    """A step's timeout, never past the run's deadline."""
    return seconds if DEADLINE is None else max(1.0, min(seconds, DEADLINE - time.monotonic()))


@dataclass
class Result:
    project: str
    build: str = "not-run"
    detail: str = ""
    variant: str = ""
    build_seconds: float = 0.0
    slowest: str = ""
    tests: str = "not-run"
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    missing_deps: list[str] = field(default_factory=list)
    failed_tests: list[str] = field(default_factory=list)
    scripts: list[dict] = field(default_factory=list)
    check: str = ""
    expected: str = ""
    verdict: str = ""


def run(cmd: list[str], log: Path, *, cwd: Path | None = None, env: dict | None = None,
        timeout: float) -> int:
    with log.open("a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        try:
            return subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout,
                                  env={**os.environ, **(env or {})}).returncode
        except subprocess.TimeoutExpired:
            f.write(f"timed out after {timeout:.0f}s\n")
            return 124


def first_compiler_error(text: str) -> str:
    for line in text.splitlines():
        if COMPILER_ERROR.search(line) and "warning" not in line.lower():
            return line.strip()[:300]
    return ""


def kbuild_error(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.startswith("error:")]
    return lines[-1].removeprefix("error:").strip()[:400] if lines else ""


def build(project: Path, res: Result, args, log: Path, jobs: int | None) -> None:
    cmd = [sys.executable, "-m", "kbuild", "build", str(project)]
    if args.env:
        cmd += ["--env", args.env]
    if args.cuda_capabilities:
        cmd += ["--cuda-capabilities", args.cuda_capabilities]
    if jobs:
        cmd += ["--jobs", str(jobs)]
    start = time.monotonic()
    code = run(cmd, log, timeout=limit(args.timeout))
    res.build_seconds = round(time.monotonic() - start, 1)
    text = log.read_text(errors="replace")
    m = re.search(r"^slowest steps: (.*)$", text, re.M)
    res.slowest = m.group(1) if m else ""
    if code == 0:
        res.build = "built"
        built = re.findall(r"(?:built|up to date) (\S+) \(", text)
        res.variant = built[-1] if built else ""
    elif code == 124:
        res.build, res.detail = "timeout", f"still compiling after {res.build_seconds:.0f}s"
    elif code == 2 and "Traceback" not in text and not first_compiler_error(kbuild_log(project)):
        res.build, res.detail = "refused", kbuild_error(text).replace(f"{project}/", "")
    else:
        res.build = "compile-error"
        res.detail = first_compiler_error(kbuild_log(project)) or kbuild_error(text) \
            or text.strip().splitlines()[-1][:300]


def kbuild_log(project: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in project.glob(".kbuild/*/build.log"))


def manifest(project: Path) -> dict:
    return tomllib.loads((project / "build.toml").read_text())


def test_env(project: Path, variant: str, work: Path) -> dict:
    general = manifest(project)["general"]
    module = general["name"].replace("-", "_")
    repo_id = general.get("hub", {}).get("repo-id") or f"kernels-community/{general['name']}"
    shim = work / f"{project.name}.import"
    shutil.rmtree(shim, ignore_errors=True)
    shim.mkdir()
    (shim / module).symlink_to(project / "build" / variant, target_is_directory=True)
    path = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH", "")) if p)
    return {"LOCAL_KERNELS": f"{repo_id}={project}", "PYTHONPATH": path}


def run_tests(project: Path, res: Result, args, work: Path, log: Path, paths: list[str]) -> None:
    tests = project / "tests"
    if not tests.is_dir():
        res.tests = "no-tests"
        return
    junit = work / f"{project.name}.junit.xml"
    junit.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
           "--rootdir", str(project), "-c", os.devnull, f"--junitxml={junit}", *(paths or ["tests"])]
    code = run(cmd, log, cwd=project, env=test_env(project, res.variant, work),
               timeout=limit(args.test_timeout))
    if code == 124:
        res.tests, res.detail = "timeout", "tests still running at their time limit"
        return
    if not junit.is_file():
        res.tests, res.detail = "failed", f"pytest exited {code} without a report"
        return
    module = manifest(project)["general"]["name"].replace("-", "_")
    missing: set[str] = set()
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            res.passed += 1
        elif outcome.tag == "skipped":
            res.skipped += 1
        else:
            text = (outcome.get("message") or "") + (outcome.text or "")
            dep = MISSING_MODULE.search(text)
            if dep and dep.group(1).split(".")[0] not in (module, "tests"):
                missing.add(dep.group(1).split(".")[0])
            else:
                res.failed += outcome.tag == "failure"
                res.errors += outcome.tag == "error"
                path = (case.get("classname") or "").replace(".", "/")
                res.failed_tests.append(f"{path}.py::{case.get('name')}")
    res.missing_deps = sorted(missing)
    if res.failed or res.errors:
        res.tests = "failed"
    elif res.passed:
        res.tests = "passed"
    else:
        res.tests = "no-tests" if not missing else "missing-deps"


def run_scripts(project: Path, res: Result, args, work: Path, log: Path, want: dict) -> None:
    """Test scripts run as their authors run them (`python tests/x.py`, in their folder), each
    case announced by a line matching `script-case`. A script that ends 0 passed all its cases;
    one stopped at its share of the time limit passed the cases it finished (the one running is
    not counted); any other exit failed at the case it was running."""
    scripts = want["test-scripts"]
    case = re.compile(want.get("script-case", r"^Running on"), re.M)
    failure = re.compile(want["script-failure"]) if want.get("script-failure") else None
    env = test_env(project, res.variant, work)
    for i, script in enumerate(scripts):
        path = project / script
        share = limit(args.test_timeout) / (len(scripts) - i)
        script_log = work / f"{project.name}.{path.stem}.log"
        script_log.write_text("")
        start = time.monotonic()
        code = run([sys.executable, path.name], script_log, cwd=path.parent, env=env, timeout=share)
        text = script_log.read_text(errors="replace")
        with log.open("a") as f:
            f.write(text)
        cases = len(case.findall(text))
        row = {"script": script, "seconds": round(time.monotonic() - start, 1), "cases": cases}
        missing = MISSING_MODULE.search(text)
        mismatches = [ln.strip() for ln in text.splitlines() if failure and failure.search(ln)]
        if mismatches:
            row["outcome"], res.failed = "failed", res.failed + len(mismatches)
            res.failed_tests += [f"{script}: {m}" for m in mismatches[:5]]
        elif code == 0:
            row["outcome"], res.passed = "passed", res.passed + cases
        elif code == 124:
            row["outcome"], res.passed = "partial", res.passed + max(0, cases - 1)
        elif missing and missing.group(1).split(".")[0] not in (project.name.replace("-", "_"),):
            row["outcome"] = "missing-deps"
            res.missing_deps = sorted({*res.missing_deps, missing.group(1).split(".")[0]})
        else:
            row["outcome"], res.passed, res.failed = "failed", res.passed + max(0, cases - 1), res.failed + 1
            failing = [ln for ln in text.splitlines() if case.search(ln)]
            res.failed_tests.append(f"{script}: {failing[-1].strip() if failing else f'exit {code}'}")
        res.scripts.append(row)


CHECK = """import json, sys
from pathlib import Path
from kbuild.stages.check import check_variant, variant_dirs
codes = {}
for d in variant_dirs(Path(sys.argv[1])):
    r = check_variant(d, python=sys.executable, load=sys.argv[2] == "load")
    print(d.name, *map(str, r.problems), sep="\\n  ")
    codes[d.name] = [p.code for p in r.problems]
Path(sys.argv[3]).write_text(json.dumps(codes))
"""


def check(project: Path, res: Result, args, log: Path) -> None:
    """`kbuild check` of each variant (an --env build is another torch than this interpreter's:
    checked without the load). A local build's mark alone (never published) is `ok (local build)`."""
    found = log.with_suffix(".check.json")
    found.unlink(missing_ok=True)
    code = run([sys.executable, "-c", CHECK, str(project / "build"), "no-load" if args.env else "load",
                str(found)], log, timeout=600)
    codes = {c for cs in json.loads(found.read_text()).values() for c in cs} if found.is_file() else None
    if code != 0 or codes is None:
        res.check = "FAILED"
    elif not codes:
        res.check = "ok"
    else:
        res.check = "ok (local build)" if codes == {"metadata.local-build"} else "FAILED"


def expected_for(name: str, table: dict) -> dict:
    return table.get("project", {}).get(name, {})


def verdict(res: Result, want: dict, gpu: bool) -> str:
    if not want:
        return "unlisted"
    build_ok = res.build == want.get("build", "built")
    if want.get("build") == "refused" and want.get("message"):
        build_ok = build_ok and want["message"] in res.detail
    if not build_ok:
        return "UNEXPECTED"
    if res.build != "built" or not gpu or res.tests == "not-run":
        return "as expected"
    tests = want.get("tests", "passed")
    allowed = set(want.get("missing-test-deps", []))
    if set(res.missing_deps) - allowed:
        return "UNEXPECTED"
    known = set(want.get("known-failures", []))
    if res.tests == "failed" and res.failed_tests and set(res.failed_tests) <= known:
        return "as expected" if res.passed else "UNEXPECTED"
    return "as expected" if res.tests == tests else "UNEXPECTED"


def one(project: Path, args, work: Path, jobs: int | None, table: dict) -> Result:
    res = Result(project.name)
    copy = work / project.name
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(project, copy, symlinks=True,
                    ignore=shutil.ignore_patterns("build", ".kbuild", "__pycache__"))
    log = work / f"{project.name}.log"
    log.write_text("")
    build(copy, res, args, log, jobs)
    if res.build == "built" and args.check:
        check(copy, res, args, log)
    want = expected_for(project.name, table)
    res.expected = want.get("build", "") + (f"/{want.get('tests', 'passed')}"
                                            if want.get("build", "built") == "built" else "")
    return res


def markdown(results: list[Result], title: str) -> str:
    rows = [f"# {title}", "",
            "| project | build | build time | tests | passed | failed | errors | skipped | "
            "missing test deps | check | details |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        detail = (r.detail or r.slowest or "").replace("|", "\\|")
        rows.append(f"| {r.project} | {r.build} | {r.build_seconds:.0f} s | {r.tests} | {r.passed} | "
                    f"{r.failed} | {r.errors} | {r.skipped} | {', '.join(r.missing_deps)} | "
                    f"{r.check} | {detail} |")
    return "\n".join(rows) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("projects", type=Path, help="a folder of kernel-builder projects")
    ap.add_argument("names", nargs="*", help="only these projects")
    ap.add_argument("--env", help="build in this matrix environment (realised from PyPI)")
    ap.add_argument("--cuda-capabilities", help="a local build for these capabilities (or native)")
    ap.add_argument("--parallel", type=int, default=1, help="builds at a time")
    ap.add_argument("--test-parallel", type=int, default=1, help="projects' tests at a time")
    ap.add_argument("--deadline", type=float, help="seconds for the whole run: work not started "
                    "by then is reported as not run")
    ap.add_argument("--jobs", type=int, help="compile jobs per build (default: cores / parallel)")
    ap.add_argument("--check", action="store_true", help="run `kbuild check` on each build")
    ap.add_argument("--no-tests", action="store_true", help="build only")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per build")
    ap.add_argument("--test-timeout", type=float, default=900, help="seconds per project's tests")
    ap.add_argument("--expected", type=Path, default=EXPECTED)
    ap.add_argument("--work", type=Path, default=Path("/tmp/kbuild-projects"))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--title", default="kernel-builder projects built with kbuild")
    args = ap.parse_intermixed_args()
    sys.path.insert(0, str(REPO / "tools"))
    projects = sorted(p for p in args.projects.resolve().iterdir() if (p / "build.toml").is_file()
                      and (not args.names or p.name in args.names))
    if not projects:
        print(f"error: no kernel-builder projects (folders with a build.toml) in {args.projects}")
        return 2
    table = tomllib.loads(args.expected.read_text()) if args.expected.is_file() else {}
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    jobs = args.jobs or max(1, (os.cpu_count() or 1) // max(1, args.parallel))
    # Every project builds in the same realised environments (--env), not one copy each.
    os.environ.setdefault("KBUILD_ENVS_DIR", str(work / "envs"))
    import torch
    gpu = torch.cuda.is_available()
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), GPU: "
          f"{torch.cuda.get_device_name() if gpu else 'none'}; {len(projects)} projects, "
          f"{args.parallel} at a time, {jobs} jobs each", flush=True)
    global DEADLINE
    DEADLINE = deadline = time.monotonic() + args.deadline if args.deadline else None

    def in_time(res: Result) -> bool:
        if deadline is None or time.monotonic() < deadline - 5:
            return True
        res.detail = res.detail or "not started: the run's --deadline had passed"
        return False

    def build_one(p: Path) -> Result:
        return one(p, args, work, jobs, table) if in_time(res := Result(p.name)) else res

    def test_one(res: Result) -> Result:
        # Tests need this interpreter's torch to load the build: not for --env builds, and a
        # CUDA build only where there is a GPU.
        if res.build == "built" and not args.no_tests and not args.env \
                and (gpu or "-cpu-" in res.variant) and in_time(res):
            want = expected_for(res.project, table)
            paths = want.get("test-paths", [])
            if paths or not want.get("test-scripts"):
                run_tests(work / res.project, res, args, work, work / f"{res.project}.log", paths)
            if want.get("test-scripts"):
                run_scripts(work / res.project, res, args, work, work / f"{res.project}.log", want)
                res.tests = ("failed" if res.failed or res.errors else
                             "passed" if res.passed else "missing-deps" if res.missing_deps else "no-tests")
            ran = [*paths, *(f"{s['script']} ({s['outcome']}, {s['cases']} cases)" for s in res.scripts)]
            if ran:
                res.detail = res.detail or f"tests run: {' '.join(ran)}"
        res.verdict = verdict(res, expected_for(res.project, table), res.tests != "not-run")
        return res

    # The largest projects first: they decide when the builds end.
    order = sorted(projects, key=lambda p: -sum(1 for _ in p.rglob("*.cu")))
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        built = {r.project: r for r in pool.map(build_one, order)}
    with ThreadPoolExecutor(max_workers=args.test_parallel) as pool:
        tested = {r.project: r for r in pool.map(test_one, built.values())}
    results = [tested[p.name] for p in projects]
    for res in results:
        print(f"{res.verdict:>12}  {res.project}: build {res.build} ({res.build_seconds:.0f}s), "
              f"tests {res.tests} ({res.passed} passed, {res.failed} failed, {res.errors} errors, "
              f"{res.skipped} skipped{', missing ' + ', '.join(res.missing_deps) if res.missing_deps else ''})"
              f"{', check ' + res.check if res.check else ''}{': ' + res.detail if res.detail else ''}",
              flush=True)
    out = (args.out or work).resolve()
    out.mkdir(parents=True, exist_ok=True)
    meta = {"torch": torch.__version__, "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name() if gpu else None, "env": args.env,
            "cuda_capabilities": args.cuda_capabilities, "parallel": args.parallel, "jobs": jobs,
            "cores": os.cpu_count()}
    (out / "projects.json").write_text(json.dumps({"run": meta,
                                                  "results": [asdict(r) for r in results]}, indent=1))
    (out / "projects.md").write_text(markdown(results, args.title))
    bad = [r for r in results if r.verdict == "UNEXPECTED"]
    print(f"{len(results) - len(bad)} of {len(results)} as expected; {out / 'projects.md'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
