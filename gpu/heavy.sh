#!/usr/bin/env bash
# One heavy kernels-community project on the GPU machine, in one call (under ten minutes):
# its build time with the heavy-build speed-ups off and on (benchmarks/bench_heavy.py, one build
# at a time, no compiler cache), the kernel's speed on both builds (bench_split_runtime.py, when
# NAME has cases there), then the project's own tests against the `on` build.
#
#   gpu/heavy.sh CORPUS.tar.gz PROJECT [OFF_LIMIT ON_LIMIT TEST_LIMIT [RUNTIME_LIMIT]]
#
# A limit of 0 leaves that step out (TEST_LIMIT, RUNTIME_LIMIT; defaults 90 and 120 s).
#
# Carried: .whl/ (the builder's and the loader's wheels, for the GPU image's Python 3.12):
#   pip download -d .whl --only-binary=:all: --python-version 3.12 --no-deps \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     kernels==0.17.2 pydantic pydantic-core annotated-types typing-inspection tomli-w tomlkit \
#     kernel-abi-check pyelftools "typing-extensions>=4.16"
# (pydantic-core at the version pydantic pins), and .kbuild/cutlass-cache.tar.gz (how to make it:
# tests/compat/run_projects_gpu.sh). Results in $OUT: bench_heavy_h200.json, split_runtime.json,
# tests.log, build logs.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
CORPUS=$1 NAME=$2 OFF_LIMIT=${3:-330} ON_LIMIT=${4:-240} TEST_LIMIT=${5:-90} RUNTIME_LIMIT=${6:-120}
OUT=${OUT:-/tmp/kbuild-heavy/out}
WORK=/tmp/kbuild-heavy
mkdir -p "$OUT" "$WORK"
[[ -d /tmp/site ]] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export LD_PRELOAD=$(g++ -print-file-name=libstdc++.so.6) PYTHONUNBUFFERED=1  # see gpu/run.sh
export PYTHONPATH=/tmp/site:$REPO/tools PATH=/tmp/site/bin:$PATH
if [[ -f .kbuild/cutlass-cache.tar.gz && ! -d .kbuild/cutlass-cache ]]; then
  mkdir -p -m 755 .kbuild/cutlass-cache
  tar -xzf .kbuild/cutlass-cache.tar.gz --no-same-owner -C .kbuild/cutlass-cache
fi
export KBUILD_CACHE_DIR=$REPO/.kbuild/cutlass-cache
nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader; nproc
rm -rf "$WORK/keep"
for mode in off on; do
  limit=$OFF_LIMIT; [[ $mode == on ]] && limit=$ON_LIMIT
  python3 benchmarks/bench_heavy.py --corpus "$CORPUS" --projects "$NAME" --modes "$mode" \
    --python python3 --limit "$limit" --out "$OUT/bench_heavy_h200.json" --keep "$WORK/keep"
done
if [[ $RUNTIME_LIMIT != 0 && -d $WORK/keep/off/$NAME && -d $WORK/keep/on/$NAME ]]; then
  timeout "$RUNTIME_LIMIT" python3 benchmarks/bench_split_runtime.py --pair "$NAME" "$WORK/keep/off/$NAME" \
    "$WORK/keep/on/$NAME" --reps 100 --rounds 5 --out "$OUT/split_runtime.json"
fi
# The project's own tests against the `on` build, through `kbuild test` (no compiling; the
# variant the loader picks, LOCAL_KERNELS and `import <module>` set up as `kbuild dev` does).
# At TEST_LIMIT pytest gets Ctrl-C and still prints what ran. HEAVY_PYTEST_ARGS selects.
build=$WORK/keep/on/$NAME/build
if [[ $TEST_LIMIT != 0 && -d $build ]]; then
  rm -rf "$WORK/src" && mkdir -p "$WORK/src" && tar -xzf "$CORPUS" -C "$WORK/src" "$NAME"
  (cd "$WORK/src/$NAME" && HF_HUB_OFFLINE=1 timeout -s INT "$TEST_LIMIT" python3 -m kbuild test \
    --build-dir "$build" -- -p no:cacheprovider -p no:xdist ${HEAVY_PYTEST_ARGS:-} 2>&1 \
    | tail -n 30) | tee "$OUT/tests.log"
fi
ls "$OUT"
