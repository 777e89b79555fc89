#!/usr/bin/env bash
# run_projects.py on a GPU machine without network: kernel-builder projects built for this
# machine's GPU (--cuda-capabilities native) and their own tests run on it.
#
#   tests/compat/run_projects_gpu.sh PROJECTS.tar.gz|PROJECTS_DIR [run_projects.py options]
#
# Carried wheels in .whl/ (the builder's and the loader's) are installed into /tmp/site first;
# CUTLASS wheels in $KBUILD_CUTLASS_WHEELS (a folder) are found there instead of on PyPI.
# Results go to $OUT (default /tmp/kbuild-projects/out): projects.json, projects.md and
# logs.tar.gz (every project's build and test log).
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
REPO=$PWD
PY=${PYTHON:-python3}
SRC=$1; shift
WORK=${KBUILD_PROJECTS_WORK:-/tmp/kbuild-projects}
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK" "$OUT"
if compgen -G ".whl/*.whl" >/dev/null && [[ ! -d /tmp/site ]]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
fi
# See gpu/run.sh: a C++ extension built on the lent H200 image needs the compiler's libstdc++.
if command -v g++ >/dev/null; then
  export LD_PRELOAD=$(g++ -print-file-name=libstdc++.so.6)${LD_PRELOAD:+:$LD_PRELOAD}
fi
if [[ -n ${KBUILD_CUTLASS_WHEELS:-} ]]; then
  export PIP_NO_INDEX=1 PIP_FIND_LINKS=$KBUILD_CUTLASS_WHEELS
fi
export PYTHONPATH=/tmp/site:$REPO/tools${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
export PYTHONUNBUFFERED=1
if [[ -f $SRC ]]; then
  rm -rf "$WORK/src" && mkdir -p "$WORK/src" && tar -xzf "$SRC" -C "$WORK/src"
  SRC=$WORK/src
fi
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader || true
"$PY" tests/compat/run_projects.py "$SRC" --work "$WORK" --out "$OUT" "$@"
rc=$?
tar -czf "$OUT/logs.tar.gz" -C "$WORK" $(cd "$WORK" && ls *.log 2>/dev/null) \
  $(cd "$WORK" && ls -d */.kbuild/*/build.log 2>/dev/null) 2>/dev/null || true
exit $rc
