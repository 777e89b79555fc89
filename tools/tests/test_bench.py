"""`kbuild bench` on a copy of img2gray (CPU, --quick): builds, runs the benchmark, writes JSON."""

from __future__ import annotations

from functools import partial
import importlib.util
import json
import math
import shutil
from pathlib import Path
from kbuild_testing import kbuild as run_kbuild

REPO = Path(__file__).resolve().parents[2]

ROW_KEYS = {"kernel", "group", "case", "shape", "dtype", "impl", "median_ms", "min_ms", "mean_ms",
            "reps", "bytes", "gbps", "x_copy", "speedup", "ok", "max_abs_err", "note", "error"}
TOP_KEYS = {"kernel", "device", "device_name", "torch", "variant", "timer", "reps", "warmup",
            "quick", "command", "bytes_formula", "copy", "skipped", "rows"}


def img2gray_copy(dst: Path) -> Path:
    dst.mkdir(parents=True)
    for part in ("build.toml", "csrc", "torch-ext"):
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, dst / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dst / part)
    (dst / "benchmarks").mkdir()
    shutil.copy2(REPO / "benchmarks" / "benchmark_img2gray.py", dst / "benchmarks")
    return dst


kbuild = partial(run_kbuild, timeout=600)


def test_bench_builds_runs_and_writes_results(work, tmp_path):
    project = img2gray_copy(work / "img2gray")
    out = tmp_path / "results"
    proc = kbuild("bench", project, "--device", "cpu", "--quick", "--out", out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "benchmark_img2gray.py" in proc.stdout and "copy bandwidth" in proc.stdout
    assert (project / "build").is_dir()  # built because no --variant-dir was given

    result = json.loads((out / "img2gray.json").read_text())
    assert TOP_KEYS <= result.keys()
    assert result["kernel"] == "img2gray" and result["device"] == "cpu" and result["quick"]
    assert result["variant"].endswith("-cpu-x86_64-linux") or "cpu" in result["variant"]
    copy = result["copy"]
    assert copy["bytes"] == 2 * copy["nbytes"] and copy["gbps"] > 0
    rows = result["rows"]
    assert {r["impl"] for r in rows} >= {"ours", "eager"}
    for r in rows:
        assert ROW_KEYS <= r.keys(), sorted(ROW_KEYS - r.keys())
        h, w, c = r["shape"]
        assert c == 3 and r["bytes"] == 4 * h * w and r["dtype"] == "uint8"
        assert r["ok"] and r["error"] is None and r["max_abs_err"] == 0
        assert r["median_ms"] > 0
        assert math.isclose(r["gbps"], r["bytes"] / r["median_ms"] / 1e6, rel_tol=1e-9)
        assert math.isclose(r["x_copy"], r["gbps"] / copy["gbps"], rel_tol=1e-9)
    ours = [r for r in rows if r["impl"] == "ours"]
    assert ours and all("eager" in r["speedup"] for r in ours)
    if importlib.util.find_spec("matplotlib"):
        assert (out / "img2gray.png").stat().st_size > 1000


def test_bench_without_benchmarks_is_one_clean_error(tmp_path):
    project = img2gray_copy(tmp_path / "img2gray")
    shutil.rmtree(project / "benchmarks")
    proc = kbuild("bench", project, "--device", "cpu", cwd=tmp_path)
    assert proc.returncode == 2
    assert "no benchmarks to run" in proc.stderr and "Traceback" not in proc.stderr
