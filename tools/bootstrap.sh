#!/usr/bin/env bash
# Set-up for a machine with Python >= 3.10 and pip, without pixi or a GPU:
# a virtual environment .venv with torch 2.13 (CPU), the builder and the test tools,
# then a build of the kernel for that torch.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0" -e "./tools[test]"
.venv/bin/kbuild build
