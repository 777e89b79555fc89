#!/usr/bin/env bash
# The author's loop on the GPU machine, in one call: `kbuild dev --cuda-capabilities native` of
# kernels-community projects, unchanged, each one's own tests run by dev against the build it
# just made (offline: `get_kernel(repo, version=N)` must resolve to that build).
#
#   gpu/dev_loop.sh CORPUS.tar.gz PROJECT[:SECONDS] ... [-- PYTEST ARGS]
#
# SECONDS bounds each project's dev (default 300). Carried: .whl/ (see gpu/heavy.sh) and, for
# CUTLASS projects, .kbuild/cutlass-cache.tar.gz. Results in $OUT: dev-<project>.log and
# dev_loop.json (each call of this script adds its projects: exit status, seconds, the variant the tests loaded, pytest's
# summary line).
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
CMDLINE="gpu/dev_loop.sh $*"
CAPS=${DEV_LOOP_CAPS-native}  # empty: a plain `kbuild dev` (to try this script without a GPU)
CORPUS=$1; shift
PROJECTS=() ARGS=()
while (($#)); do
  if [[ $1 == -- ]]; then shift; ARGS=("$@"); break; fi
  PROJECTS+=("$1"); shift
done
OUT=${OUT:-/tmp/kbuild-dev-loop/out}
WORK=${DEV_LOOP_WORK:-/tmp/kbuild-dev-loop}  # another WORK (and OUT) lets two calls run side by side
mkdir -p "$OUT" "$WORK"
[[ -d /tmp/site ]] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export LD_PRELOAD=$(g++ -print-file-name=libstdc++.so.6) PYTHONUNBUFFERED=1  # see gpu/run.sh
export PYTHONPATH=/tmp/site:$REPO/tools${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH HF_HUB_OFFLINE=1
if [[ -f .kbuild/cutlass-cache.tar.gz && ! -d .kbuild/cutlass-cache ]]; then
  mkdir -p -m 755 .kbuild/cutlass-cache
  tar -xzf .kbuild/cutlass-cache.tar.gz --no-same-owner -C .kbuild/cutlass-cache
fi
[[ -d .kbuild/cutlass-cache ]] && export KBUILD_CACHE_DIR=$REPO/.kbuild/cutlass-cache
nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader || true; nproc
rm -rf "$WORK/src" && mkdir -p "$WORK/src" && tar -xzf "$CORPUS" -C "$WORK/src"
: > "$WORK/results"
for spec in "${PROJECTS[@]}"; do
  name=${spec%%:*} limit=300
  [[ $spec == *:* ]] && limit=${spec#*:}
  log=$OUT/dev-$name.log
  start=$(date +%s.%N)
  (cd "$WORK/src/$name" && timeout -s INT "$limit" python3 -m kbuild dev ${CAPS:+--cuda-capabilities "$CAPS"} \
     -- -p no:cacheprovider "${ARGS[@]}") > "$log" 2>&1
  rc=$?
  seconds=$(python3 -c "import time; print(round(time.time() - $start, 1))")
  loaded=$(grep -m1 '^tests load ' "$log" || true)
  summary=$(grep -E '(passed|failed|error|no tests ran|deselected)' "$log" | tail -n 1 || true)
  tail -n 5 "$log"; echo
  python3 - "$name" "$rc" "$seconds" "$loaded" "$summary" >> "$WORK/results" <<'PY'
import json, sys
name, rc, seconds, loaded, summary = sys.argv[1:]
print(json.dumps({"project": name, "exit": int(rc), "seconds": float(seconds),
                  "tests_load": loaded, "pytest": summary.strip("= ")}))
PY
done
python3 - "$WORK/results" "$OUT/dev_loop.json" "$CMDLINE" <<'PY'
import json, os, subprocess, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
try:
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
except OSError:
    gpu = "none"
runs = json.load(open(sys.argv[2]))["runs"] if os.path.exists(sys.argv[2]) else []
runs.append({"command": sys.argv[3], "results": rows})  # a second call in the same $OUT adds
json.dump({"gpu": gpu, "cores": os.cpu_count(), "runs": runs}, open(sys.argv[2], "w"), indent=1)
print(json.dumps(rows, indent=1))
PY
