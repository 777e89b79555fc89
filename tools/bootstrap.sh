#!/usr/bin/env bash
# Set-up for a machine with Python >= 3.10 and pip, without pixi or a GPU:
# a virtual environment .venv with torch 2.13 (CPU), the builder and the test tools,
# then a build of the kernel for that torch.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0" -e "./tools[test]"
# Optional, never failing the set-up: bubblewrap, the sandbox of sccache-dist's build servers
# (the distributed-compile test skips without it), where this runs as root with apt-get.
if ! command -v bwrap >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  { export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q bubblewrap || { apt-get update -q && apt-get install -y -q bubblewrap; }; } \
    >/dev/null 2>&1 || echo "bootstrap: bubblewrap not installed (optional)" >&2
fi
.venv/bin/kbuild build
