"""A new kernel author's first hour, scripted and timed: every step is the command an author
types (a fresh process each), run in a temporary folder.

    init -> CPU build -> tests (kbuild dev) -> CUDA variant (build-all from the project's
    pixi.toml, environment realised from PyPI) -> check -> wheels -> local Hub (kbuild hub
    serve) -> upload -> get_kernel from the Hub

    python benchmarks/author_journey.py [--cuda-env torch214-cu130] [--no-cuda] [--json OUT]

Prints one line per step and writes the timings as JSON. The CUDA step realises the
environment under $KBUILD_ENVS_DIR (or the new project's .kbuild/envs): the first time that
downloads torch and the CUDA toolkit wheels (GBs), later runs reuse it. Needs nvcc-capable
toolkit wheels for the environment (CUDA 13 here), no GPU. tools/tests/test_init_journey.py
runs the same steps and asserts what each one produced.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAME = "my-kernel"
REPO_ID = "your-org/my-kernel"
TOKEN = "local-token"
GET_KERNEL = """\
import torch, torch.nn.functional as F
from kernels import get_kernel
k = get_kernel({repo!r}, version=1)
x = torch.randn(1000, 33)
torch.testing.assert_close(k.my_kernel(x, 0.2), F.leaky_relu(x, 0.2))
print("OK", k.__name__)
"""


class StepFailed(RuntimeError):
    pass


@dataclass
class Step:
    name: str
    command: str
    seconds: float
    output: str = ""


@dataclass
class Journey:
    workdir: Path
    steps: list[Step] = field(default_factory=list)

    @property
    def project(self) -> Path:
        return self.workdir / NAME

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "KERNELS_"))}
        env.pop("LOCAL_KERNELS", None)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "tools"), env.get("PYTHONPATH")) if p)
        env["HF_HOME"] = str(self.workdir / "hf_home")
        return {**env, **extra}

    def run(self, name: str, args: list[str], cwd: Path | None = None, shown: str = "",
            **env: str) -> Step:
        """Runs one command, times it, raises StepFailed with its output when it fails."""
        start = time.monotonic()
        proc = subprocess.run(args, cwd=cwd or self.project, env=self.env(**env),
                              capture_output=True, text=True, timeout=1800)
        step = Step(name, shown or " ".join(args), time.monotonic() - start,
                    proc.stdout + proc.stderr)
        self.steps.append(step)
        if proc.returncode != 0:
            raise StepFailed(f"{name}: `{step.command}` exited {proc.returncode}\n{step.output[-4000:]}")
        return step

    def kbuild(self, name: str, *args: str, cwd: Path | None = None, **env: str) -> Step:
        return self.run(name, [sys.executable, "-m", "kbuild", *args], cwd=cwd,
                        shown=" ".join(["kbuild", *args]), **env)


def start_hub(journey: Journey) -> tuple[subprocess.Popen, str, float]:
    """`kbuild hub serve --port 0` in the background; its endpoint and start-up time."""
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "kbuild", "hub", "serve", "--port", "0"],
                            env=journey.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        m = re.search(r"HF_ENDPOINT=(http://\S+)", line)
        if m:
            return proc, m.group(1), time.monotonic() - start
    raise StepFailed(f"kbuild hub serve printed no endpoint (exit {proc.wait()})")


def run(workdir: Path, *, cuda_env: str | None = "torch214-cu130", log=print) -> Journey:
    """The whole journey in `workdir`; returns its steps (raises StepFailed on the first failure)."""
    j = Journey(workdir)

    def done(step: Step) -> None:
        log(f"{step.name:<12} {step.seconds:6.1f}s  {step.command}")

    done(j.kbuild("init", "init", NAME, cwd=workdir))
    done(j.kbuild("build-cpu", "build"))
    done(j.kbuild("tests", "dev"))
    if cuda_env:
        done(j.kbuild("cuda-variant", "build-all", "--only", cuda_env,
                      "--json", "../build-all.json"))
    done(j.kbuild("check", "check"))
    done(j.kbuild("wheel", "to-wheel", "--out", "../dist"))
    hub, endpoint, seconds = start_hub(j)
    try:
        j.steps.append(Step("hub-serve", "kbuild hub serve --port 0", seconds, endpoint))
        done(j.steps[-1])
        done(j.kbuild("upload", "upload", "--output-json", "../upload.json",
                      HF_ENDPOINT=endpoint, HF_TOKEN=TOKEN))
        done(j.run("get_kernel", [sys.executable, "-c", GET_KERNEL.format(repo=REPO_ID)],
                   cwd=workdir, shown="python -c 'get_kernel(...)'", HF_ENDPOINT=endpoint,
                   HF_TOKEN=TOKEN))
    finally:
        hub.terminate()
        hub.wait(timeout=30)
    return j


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cuda-env", default="torch214-cu130", help="environment of the CUDA step")
    p.add_argument("--no-cuda", action="store_true", help="skip the CUDA variant")
    p.add_argument("--json", type=Path, default=REPO / "docs" / "author_journey.json")
    p.add_argument("--keep", type=Path, default=None, help="work here instead of a temp folder")
    args = p.parse_args(argv)
    # A new author's sources are in no compiler cache: time the builds without one.
    os.environ.setdefault("KBUILD_COMPILER_CACHE", "none")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = (args.keep or Path(tmp)).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        load = os.getloadavg()[0]
        start = time.monotonic()
        journey = run(workdir, cuda_env=None if args.no_cuda else args.cuda_env)
        total = time.monotonic() - start
        built = workdir / "build-all.json"
        env = json.loads(built.read_text())["results"][0] if built.is_file() else {}
    print(f"{'total':<12} {total:6.1f}s")
    result = {"total_seconds": round(total, 1), "cpus": os.cpu_count(),
              "machine": platform.machine(), "python": platform.python_version(),
              "date": time.strftime("%Y-%m-%d"), "load_before": round(load, 2),
              "cuda_environment": {"created": env.get("env_created"),
                                   "seconds": round(env.get("env_seconds") or 0, 1)},
              "steps": [{k: (round(v, 1) if k == "seconds" else v) for k, v in asdict(s).items()
                         if k != "output"} for s in journey.steps]}
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
