#!/usr/bin/env bash
# run_projects.py on a GPU machine without network: kernel-builder projects built for this
# machine's GPU (--cuda-capabilities native) and their own tests run on it.
#
#   tests/compat/run_projects_gpu.sh PROJECTS.tar.gz|PROJECTS_DIR [run_projects.py options]
#
# Carried wheels in .whl/ (the builder's and the loader's) are installed into /tmp/site first.
# The machine has no network: the CUTLASS headers come from a kbuild cache filled where there is
# one and carried ($KBUILD_CACHE_DIR, .kbuild/cutlass-cache, or .kbuild/cutlass-cache.tar.gz of
# it: ~6 MB for CUTLASS 3.6.0, 3.8.0 and 4.0.0, against ~76 MB unpacked), made with
#   python tests/compat/run_corpus.py --prefetch .kbuild/cutlass-cache \
#       --cutlass-archives ARCHIVES PROJECTS_DIR
#   tar -czf .kbuild/cutlass-cache.tar.gz -C .kbuild/cutlass-cache cutlass
# (ARCHIVES: a folder of cutlass-X.Y.Z-headers.tar.gz tag archives, for the releases no wheel
# gives); each tree is verified by its digest here before use, and nothing is downloaded.
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
if [[ -z ${KBUILD_CACHE_DIR:-} && ! -d .kbuild/cutlass-cache && -f .kbuild/cutlass-cache.tar.gz ]]; then
  mkdir -p -m 755 .kbuild/cutlass-cache  # modes as packed (755/644), owned by whoever unpacks
  tar -xzf .kbuild/cutlass-cache.tar.gz --no-same-owner -C .kbuild/cutlass-cache
fi
if [[ -z ${KBUILD_CACHE_DIR:-} && -d .kbuild/cutlass-cache ]]; then
  export KBUILD_CACHE_DIR=$REPO/.kbuild/cutlass-cache
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
