#!/usr/bin/env bash
# The main job: the core on a login node (no torch), the `topology` command's pre-launch checks,
# and a tensor-parallel model trained on a real 4-process gloo world that matches one process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "################ 1. the pure core"
python examples/core_tour.py
echo
echo "################ 2. the topology command"
bash scripts/demo_cli.sh
echo
echo "################ 3. a tensor-parallel model on gloo (tp2 x dp2) vs one process"
python -m topology_torch.demo --nproc 4
