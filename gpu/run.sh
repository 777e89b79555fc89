#!/usr/bin/env bash
# The GPU run in one command: build, test, sanitize and benchmark every kernel, and the
# end-to-end model.
#
#   gpu/run.sh [build] [test] [bench] [e2e] [sanitize] [profile] [tune]
#   (no argument: all of them but tune)
#
# Run from anywhere in a checkout on a CUDA machine (python3 with torch, nvcc, compute-sanitizer);
# carried wheels in .whl/ are installed first. Stages, in this order (sanitize after bench: its
# duration under the sanitizer is the least predictable):
#   setup     always: install .whl/*.whl into /tmp/site, print GPU / torch / tool versions
#   build     always (a no-op once built): img2gray, activation and rmsnorm (cuda) with
#             `kbuild build PROJECT --build-dir $WORK/<name>/build`
#   test      pytest tests examples -m "$KBUILD_GPU_TEST_MARK" (default "not slow"; "cuda":
#             only the tests that run on the GPU); tools/tests last, unless
#             KBUILD_GPU_TOOLS_TESTS=0
#   bench     `kbuild bench` per project against the variants built above (KBUILD_GPU_BENCH:
#             only these projects, e.g. "rmsnorm activation")
#   e2e       benchmarks/e2e_llama.py --compile: a transformers Llama model plain, kernelized
#             and with F.rms_norm (results beside the benchmarks'), then gpu/summary.py
#   sanitize  compute-sanitizer memcheck over gpu/sanitize.py (img2gray + activation CUDA
#             kernels, then rmsnorm's) on odd shapes
#   profile   gpu/profile.py (host and device time per call at decode sizes), then Nsight
#             Compute over gpu/profile.py --ncu
#   tune      gpu/tune/tune.py --back-to-back (the img2gray design sweep, timed back to back)
# A failing stage does not stop the others; the exit status is 1 when any failed.
# Everything stays within KBUILD_GPU_BUDGET seconds (default 540): a stage gets at most what
# is left, and stages that no longer fit are reported as SKIPPED.
# Results, rewritten after every stage: $OUT/summary.txt (stage table, versions, benchmark
# tables and targets) and $OUT/results.tar.gz (results/: all logs, bench/*.json, bench/*.png).
# Without $OUT they go to $WORK/out. $WORK defaults to /tmp/kbuild-gpu.
# KBUILD_GPU_DEVICE=cpu: a CPU smoke run of this script (cpu variants, quick benchmarks,
# sanitize.py without compute-sanitizer).
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
PY=${PYTHON:-python3}
WORK=${KBUILD_GPU_WORK:-/tmp/kbuild-gpu}
RES=$WORK/results
OUT=${OUT:-$WORK/out}
BUDGET=${KBUILD_GPU_BUDGET:-540}
DEVICE=${KBUILD_GPU_DEVICE:-cuda}
RESERVE=20                      # seconds kept for packing the results
SANITIZER_FLAGS=${SANITIZER_FLAGS---report-api-errors no}  # set it empty for the bare command
SELF=$REPO/gpu/run.sh
ARGS="$*"
export PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-150}
# On the lent H200 image, a C++ extension built there (ours, or torch.utils.cpp_extension's)
# crashes in std::ostream << long unless the compiler's own libstdc++ is loaded first: some
# module in that python process brings a second copy of libstdc++'s locale facets. Seen with
# torch 2.11 + g++ 13.3 there; not on our CI machines. See docs/gpu.md.
if [[ $DEVICE == cuda ]] && command -v g++ >/dev/null; then
  export LD_PRELOAD=$(g++ -print-file-name=libstdc++.so.6)${LD_PRELOAD:+:$LD_PRELOAD}
fi
export PYTHONPATH=/tmp/site:$REPO/tools${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
export WORK RES PY DEVICE

# name:project:backend (empty backend: every backend the manifest lists)
PROJECTS=("img2gray:.:$DEVICE" "activation:examples/activation:$DEVICE" "rmsnorm:examples/rmsnorm:$DEVICE")
TEST_MARK=${KBUILD_GPU_TEST_MARK:-not slow}

have() { local f; for f in $1; do [[ -e $f ]] && return 0; done; return 1; }  # glob matches?

# --- internal sub-commands (each run under `timeout` by a stage) ------------------------------
if [[ ${1:-} == __build ]]; then
  pids=() names=()
  for spec in "${PROJECTS[@]}"; do
    IFS=: read -r name proj backend <<<"$spec"
    echo "building $name ($proj${backend:+, $backend}) -> $WORK/$name/build"
    "$PY" -m kbuild build "$proj" --build-dir "$WORK/$name/build" ${backend:+--backend "$backend"} \
      >"$RES/build-$name.log" 2>&1 &
    pids+=($!) names+=("$name")
  done
  rc=0
  for i in "${!pids[@]}"; do
    if wait "${pids[$i]}"; then echo "${names[$i]}: $(tail -n 1 "$RES/build-${names[$i]}.log")"
    else rc=1; echo "${names[$i]}: BUILD FAILED"; tail -n 40 "$RES/build-${names[$i]}.log"; fi
  done
  exit $rc
fi

if [[ ${1:-} == __bench ]]; then  # __bench NAME PROJECT
  name=$2 proj=$3
  opts=(--out "$RES/bench" --device "$DEVICE")
  [[ $DEVICE == cpu ]] && opts+=(--quick)
  if have "$WORK/$name/build/*/metadata.json"; then
    opts+=(--variant-dir "$WORK/$name/build")
  fi  # else (the build stage failed) kbuild bench builds it, into PROJECT/build
  exec "$PY" -m kbuild bench "$proj" "${opts[@]}"
fi

# --- stage bookkeeping -------------------------------------------------------------------------
want_all=1 STAGES=()
for a in "$@"; do
  case $a in
    build|test|sanitize|bench|e2e|profile|tune) STAGES+=("$a"); want_all=0 ;;
    all) want_all=1 ;;
    -h|--help) sed -n '2,33p' "$SELF"; exit 0 ;;
    *) echo "unknown stage '$a' (build, test, bench, e2e, sanitize, profile, tune)" >&2; exit 2 ;;
  esac
done
wants() { [[ $want_all == 1 && $1 != tune ]] && return 0; local s; for s in "${STAGES[@]}"; do [[ $s == "$1" ]] && return 0; done; return 1; }

mkdir -p "$RES" "$OUT"
rm -f "$RES"/*.log "$RES/stages.txt" "$RES/bench-summary.md"
rm -rf "$RES/bench"
START=$(date +%s)
FAILED=0
elapsed() { echo $(( $(date +%s) - START )); }

pack() {
  {
    echo "gpu/run.sh ${ARGS:-(all stages)} — $(date -u +%Y-%m-%dT%H:%M:%SZ), $(elapsed)s elapsed, budget ${BUDGET}s"
    echo
    [[ -f $RES/versions.txt ]] && cat "$RES/versions.txt" && echo
    printf '%-18s %-12s %6s  %s\n' stage status seconds log
    [[ -f $RES/stages.txt ]] && cat "$RES/stages.txt"
    echo
    [[ -f $RES/bench-summary.md ]] && cat "$RES/bench-summary.md"
  } >"$OUT/summary.txt" 2>/dev/null
  tar -czf "$OUT/.results.tmp" -C "$WORK" results 2>/dev/null && mv -f "$OUT/.results.tmp" "$OUT/results.tar.gz"
}

record() { printf '%-18s %-12s %6s  %s\n' "$1" "$2" "$3" "$4" >>"$RES/stages.txt"; }

# stage NAME CAP_SECONDS CMD...: runs CMD under timeout, logs to $RES/NAME.log, records status.
stage() {
  local name=$1 cap=$2; shift 2
  local left=$(( BUDGET - $(elapsed) - RESERVE ))
  if (( left < 30 )); then
    echo "=== $name: SKIPPED (${left}s of the time budget left)"
    record "$name" SKIPPED 0 "out of time budget"; FAILED=1; pack; return
  fi
  (( cap > left )) && cap=$left
  echo; echo "=== $name (limit ${cap}s, $(elapsed)s elapsed) ==="
  local t0; t0=$(date +%s)
  timeout --kill-after=15 "$cap" "$@" 2>&1 | tee "$RES/$name.log"
  local rc=${PIPESTATUS[0]} dt=$(( $(date +%s) - t0 ))
  if (( rc == 0 )); then record "$name" ok "$dt" "$name.log"
  elif (( rc == 124 || rc == 137 )); then record "$name" "TIMEOUT" "$dt" "$name.log"; FAILED=1
  else record "$name" "FAILED($rc)" "$dt" "$name.log"; FAILED=1; fi
  pack
}

# --- setup -------------------------------------------------------------------------------------
echo "=== setup ==="
WHEELS=${KBUILD_GPU_WHEELS-.whl}  # carried wheels (set it empty to install nothing)
if [[ -n $WHEELS ]] && have "$WHEELS/*.whl"; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$WHEELS"/*.whl 2>&1 | grep -v -i "warning" || true
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv 2>&1 || echo "nvidia-smi failed"
  "$PY" - <<'EOF' 2>&1
import importlib, platform, torch
print(f"python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"GPU: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'NONE'}")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"  {p.multi_processor_count} SMs, {p.total_memory / 2**30:.0f} GiB, capability "
          f"{p.major}.{p.minor}, L2 {getattr(p, 'L2_cache_size', 0) / 2**20:.0f} MiB")
from importlib import metadata
for name in ("triton", "kernels", "transformers", "cupy", "matplotlib", "rich", "typer", "pydantic"):
    try:
        importlib.import_module(name)
        dist = "cupy-cuda13x" if name == "cupy" else name
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            version = "(version unknown)"
        print(f"  {name} {version}")
    except Exception as e:
        print(f"  {name} MISSING ({type(e).__name__}: {e})")
EOF
  echo "nvcc: $(nvcc --version 2>&1 | tail -n 2 | head -n 1)"
  echo "compute-sanitizer: $(compute-sanitizer --version 2>&1 | tail -n 1)"
  if git rev-parse --git-dir >/dev/null 2>&1; then
    echo "cpus: $(nproc), git: $(git rev-parse --short HEAD)$(git diff --quiet HEAD 2>/dev/null || echo ' (dirty)')"
  else
    echo "cpus: $(nproc), git: (no repository)"
  fi
} | tee "$RES/versions.txt"
pack

# --- build (always: the other stages use it; a no-op once built) -------------------------------
stage build 360 bash "$SELF" __build

# --- test --------------------------------------------------------------------------------------
if wants test; then
  stage test 300 "$PY" -m pytest tests examples -q -o "addopts=-ra --strict-markers" -m "$TEST_MARK" -p no:cacheprovider --durations=15
fi

# --- bench -------------------------------------------------------------------------------------
if wants bench; then
  nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu \
    --format=csv >"$RES/clocks-before-bench.txt" 2>&1
  for spec in "${PROJECTS[@]}"; do
    IFS=: read -r name proj _ <<<"$spec"
    [[ -n ${KBUILD_GPU_BENCH:-} && " $KBUILD_GPU_BENCH " != *" $name "* ]] && continue
    stage "bench-$name" 240 bash "$SELF" __bench "$name" "$proj"
  done
  pack
fi

summarize() {
  "$PY" gpu/summary.py "$RES/bench" --out "$RES/bench-summary.md" >/dev/null 2>"$RES/summary-errors.log" \
    || echo "no benchmark summary (see summary-errors.log)"
  pack
}

# --- e2e ---------------------------------------------------------------------------------------
if wants e2e; then
  E2E=(--rmsnorm "$WORK/rmsnorm" --activation "$WORK/activation" --out "$RES/bench" --device "$DEVICE")
  if [[ $DEVICE == cpu ]]; then E2E+=(--smoke); else E2E+=(--compile); fi
  stage e2e 300 "$PY" benchmarks/e2e_llama.py "${E2E[@]}"
fi
if wants bench || wants e2e; then summarize; fi

# --- sanitize ----------------------------------------------------------------------------------
if wants sanitize; then
  SAN=$(command -v compute-sanitizer || echo "$(dirname "$(command -v nvcc)")/compute-sanitizer")
  SAN=("$SAN" --tool memcheck --error-exitcode 1)
  # shellcheck disable=SC2206  # SANITIZER_FLAGS is a list of options
  SAN+=($SANITIZER_FLAGS)
  [[ $DEVICE == cpu ]] && SAN=(env)  # no compute-sanitizer on the CPU
  stage sanitize 200 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 "${SAN[@]}" "$PY" gpu/sanitize.py \
    --device "$DEVICE" --img2gray "$WORK/img2gray/build" --activation "$WORK/activation/build"
  stage sanitize-rmsnorm 120 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 "${SAN[@]}" "$PY" gpu/sanitize.py \
    --device "$DEVICE" --rmsnorm "$WORK/rmsnorm/build"
fi

# --- profile -----------------------------------------------------------------------------------
if wants profile && [[ $DEVICE == cuda ]]; then
  KERNELS=(--rmsnorm "$WORK/rmsnorm/build" --activation "$WORK/activation/build")
  stage profile 120 "$PY" gpu/profile.py "${KERNELS[@]}" --out "$RES/bench"
  NCU=$(command -v ncu || echo "$(dirname "$(command -v nvcc)")/ncu")
  stage ncu 150 "$NCU" --clock-control none -c 40 --section SpeedOfLight --section LaunchStats \
    --section Occupancy --section MemoryWorkloadAnalysis \
    -k 'regex:rms_norm|silu_and_mul|unary_kernel|img2gray|vectorized_layer_norm|rms' \
    "$PY" gpu/profile.py "${KERNELS[@]}" --img2gray "$WORK/img2gray/build" --ncu
fi

# --- tune --------------------------------------------------------------------------------------
if wants tune && [[ $DEVICE == cuda ]]; then
  stage tune 150 "$PY" gpu/tune/tune.py --back-to-back --reps 20 --out "$RES/tune"
fi

# --- the builder's own tests last (they matter least for the GPU) ------------------------------
if wants test && [[ ${KBUILD_GPU_TOOLS_TESTS:-1} != 0 ]]; then
  # The builder's own tests, less those that need PyPI or huggingface_hub >= 2.3 (the
  # publishing stack): the image has huggingface_hub 1.x and no network. CI runs them all.
  stage tools-tests 240 "$PY" -m pytest tools/tests -q -o "addopts=-ra --strict-markers" -m "not slow" -p no:cacheprovider --durations=10 \
    --ignore=tools/tests/test_hub_server.py --ignore=tools/tests/test_publish.py \
    --ignore=tools/tests/test_to_wheel.py --ignore=tools/tests/test_build_all.py
fi

pack
echo
cat "$OUT/summary.txt"
echo "results: $OUT/summary.txt, $OUT/results.tar.gz"
exit $FAILED
