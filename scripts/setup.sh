#!/usr/bin/env bash
# Creates .venv (once) and installs rank-topology with everything the demo and the tests use.
# torch is pinned to 2.13.0, the CPU build this machine installs from disk in seconds; an unpinned
# torch would pull a multi-GB CUDA build. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
stamp=.venv/.rank-topology-setup
want=$(cat pyproject.toml scripts/setup.sh | cksum)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
"${PIP[@]}" install "torch==2.13.0" 2>&1 | grep -v "^WARNING: Location" || true
"${PIP[@]}" install -e ".[torch,test,cli,plot]" 2>&1 | grep -v "^WARNING: Location" || true
# Optional differential oracle for the tests: Megatron-core's parallel_state (never a dependency of
# the library; --no-deps keeps it from pulling anything but the two small packages it imports).
"${PIP[@]}" install --no-deps "megatron-core==0.16.1" numpy einops 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import torch, topology, topology_torch, hypothesis" 
echo "$want" > "$stamp"
