#!/usr/bin/env bash
# Create .venv and install SiMoE with its test tools. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# torch==2.13.0 is pinned exactly in pyproject.toml: a CPU machine with the local CPU
# build takes it, and no range can make pip fetch a multi-GB CUDA build instead.
.venv/bin/python -m pip install --quiet -e '.[dev]'
echo "installed: $(.venv/bin/simoe-agent --help >/dev/null && echo simoe-agent simoe-server)"
