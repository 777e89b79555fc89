#!/usr/bin/env bash
# The compatibility corpus on a GPU machine: every project built with this machine's torch
# (CUDA ones for its GPU), each built project's tests run with the `kernels` loader.
#
#   tests/compat/run_gpu.sh [NAME ...]
#
# Needs python3 with torch, nvcc matching torch's CUDA, and the builder's Python dependencies
# (carried wheels in .whl/ are installed into /tmp/site first, as gpu/run.sh does). The machine
# has no network: fill a kbuild cache with the CUTLASS headers beforehand where there is one and
# carry it (or .kbuild/cutlass-cache.tar.gz of it, made with
# `tar -czf .kbuild/cutlass-cache.tar.gz -C .kbuild/cutlass-cache cutlass`),
#   python tests/compat/run_corpus.py --prefetch .kbuild/cutlass-cache
# ($KBUILD_CACHE_DIR, or .kbuild/cutlass-cache in the checkout, is used when present; each tree
# is verified by its digest before use).
# Results: one line per case on stdout, logs under $WORK (/tmp/kbuild-compat), and
# $OUT/compat.json (default $WORK). Exit status 1 when a case does not end as expected.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
REPO=$PWD
PY=${PYTHON:-python3}
WORK=${KBUILD_COMPAT_WORK:-/tmp/kbuild-compat}
mkdir -p "$WORK"
if compgen -G ".whl/*.whl" >/dev/null && [[ ! -d /tmp/site ]]; then
  "$PY" -m pip install -q --no-deps --target /tmp/site .whl/*.whl
fi
# See gpu/run.sh: on the lent H200 image a C++ extension built there needs the compiler's own
# libstdc++ loaded first.
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
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
  "gpu", torch.cuda.get_device_name() if torch.cuda.is_available() else None)'
exec "$PY" tests/compat/run_corpus.py --device cuda --work "$WORK" ${OUT:+--out "$OUT"} "$@"
