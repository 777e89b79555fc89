"""Build every corpus project as its expected.toml says, with this interpreter's torch, and run
the built ones' own tests with the `kernels` loader. Used by run_gpu.sh on a GPU machine (the
default CI run does the same in tools/tests/test_compat.py).

    python tests/compat/run_corpus.py [--device cuda|cpu] [--work DIR] [--out DIR] [NAME ...]
    python tests/compat/run_corpus.py --prefetch DIR [--cutlass-archives ARCHIVES] [PROJECTS ...]
        # CUTLASS headers for an offline machine: what this corpus (or PROJECTS) needs, into the
        # kbuild cache DIR (carry it; point KBUILD_CACHE_DIR at it there)

--device cuda runs every case (CUDA ones on the GPU); --device cpu skips the CUDA ones. Prints
one line per case and writes DIR/compat.json; exits 1 when any case does not end as expected.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def cases(names: list[str]) -> list[tuple[str, dict]]:
    out = []
    for expected in sorted(HERE.glob("*/expected.toml")):
        if names and expected.parent.name not in names:
            continue
        out += [(expected.parent.name, c) for c in tomllib.loads(expected.read_text())["case"]]
    return out


def run(cmd: list[str], log: Path, env: dict | None = None, timeout: int = 900,
        cwd: Path | None = None) -> int:
    with log.open("a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        try:
            return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, cwd=cwd,
                                  env={**os.environ, **(env or {})}).returncode
        except subprocess.TimeoutExpired:
            f.write("timed out\n")
            return 124


def one(name: str, case: dict, work: Path) -> dict:
    backend = case["backend"]
    project = work / f"{name}-{backend}"
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(HERE / name, project, ignore=shutil.ignore_patterns("__pycache__", "build", ".kbuild"))
    log = work / f"{name}-{backend}.log"
    log.write_text("")
    start = time.monotonic()
    code = run([sys.executable, "-m", "kbuild", "build", str(project), "--backend", backend], log)
    text = log.read_text()
    result = {"project": name, "backend": backend, "expected": case["outcome"], "log": str(log)}
    if case["outcome"] == "refused":
        ok = code == 2 and case["message"] in text and "Traceback" not in text
        ok = ok and not (project / "build").exists()
        result.update(status="ok" if ok else "FAILED", detail=text.strip().splitlines()[-2:])
    elif code != 0:
        result.update(status="FAILED", detail=text.strip().splitlines()[-5:])
    else:
        tests = project / "tests"
        status, detail = "ok", "built (no tests)"
        if tests.is_dir():
            code = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--rootdir", ".", str(tests)], log, cwd=project,
                       env={"KBUILD_COMPAT_BACKEND": backend})
            detail = log.read_text().strip().splitlines()[-1]
            status = "ok" if code == 0 else "FAILED"
        result.update(status=status, detail=detail)
    executed = [n for n in case.get("absent", []) if list(work.rglob(n))]
    if executed:
        result.update(status="FAILED", detail=f"{executed} appeared: a value was executed")
    result["seconds"] = round(time.monotonic() - start, 1)
    return result


def prefetch(dest: Path, projects: list[Path], archives: Path | None = None) -> None:
    """Fills the kbuild cache at `dest` with the CUTLASS headers the projects need (every
    build.toml under each path), each verified by its tree digest. `archives`: a folder of
    `cutlass-X.Y.Z-headers.tar.gz` tag archives, served from 127.0.0.1 as KBUILD_CUTLASS_URL
    while fetching (no GitHub needed; the wheel-backed releases still come from PyPI)."""
    from kbuild.stages.generate import cutlass
    names: set[str] = set()
    for path in projects:
        for manifest in [path] if path.is_file() else sorted(path.rglob("build.toml")):
            names |= {d for k in tomllib.loads(manifest.read_text()).get("kernel", {}).values()
                      for d in k.get("depends", []) if d in cutlass.CUTLASS}
    with _archives_served(archives):
        for name in sorted(names):
            tree = cutlass.provision(cutlass.CUTLASS[name], dest.resolve())
            source = cutlass.read_stamp(tree)["source"]
            where = source.get("url") or f"{source['package']} {source['version']}"
            print(f"{name}: CUTLASS {cutlass.CUTLASS[name].version} from {where}: {tree}")


@contextlib.contextmanager
def _archives_served(archives: Path | None):
    """KBUILD_CUTLASS_URL pointed at a local server of `archives` while inside (None: as is)."""
    if archives is None:
        yield
        return
    sys.path.insert(0, str(REPO / "tools" / "tests"))
    from cutlass_server import serve_folder
    old = os.environ.get("KBUILD_CUTLASS_URL")
    with serve_folder(archives) as server:
        os.environ["KBUILD_CUTLASS_URL"] = server.base
        try:
            yield
        finally:
            os.environ.pop("KBUILD_CUTLASS_URL")
            if old is not None:
                os.environ["KBUILD_CUTLASS_URL"] = old


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="only these projects (with --prefetch: folders of projects)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--work", type=Path, default=Path("/tmp/kbuild-compat"))
    ap.add_argument("--out", type=Path, help="where compat.json goes (default: --work)")
    ap.add_argument("--prefetch", type=Path, help="fill this kbuild cache with the CUTLASS headers "
                    "the corpus (or the project folders named) needs")
    ap.add_argument("--cutlass-archives", type=Path, help="with --prefetch: a folder of CUTLASS tag "
                    "archives (cutlass-X.Y.Z-headers.tar.gz) to serve locally instead of GitHub's")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "tools"))
    if args.prefetch:
        prefetch(args.prefetch, [Path(n) for n in args.names] or [HERE], args.cutlass_archives)
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    results = []
    for name, case in cases(args.names):
        if case.get("cuda") and args.device != "cuda":
            continue
        result = one(name, case, args.work)
        results.append(result)
        print(f"{result['status']:>15}  {name} [{case['backend']}] {result['seconds']}s  "
              f"{result['detail'] if isinstance(result['detail'], str) else ' / '.join(result['detail'])}",
              flush=True)
    out = args.out or args.work
    out.mkdir(parents=True, exist_ok=True)
    (out / "compat.json").write_text(json.dumps(results, indent=1))
    bad = [r for r in results if r["status"] != "ok"]
    print(f"{len(results) - len(bad)} of {len(results)} cases as expected; results in {out / 'compat.json'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
