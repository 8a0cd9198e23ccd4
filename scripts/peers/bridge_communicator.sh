#!/usr/bin/env bash
# Megatron-LM's own tests/unit_tests/pipeline_parallel/test_bridge_communicator.py and
# test_multimodule_communicator.py (tag core_v0.19.0; 8 ranks, gloo on CPU): Megatron's
# BridgeCommunicator and MultiModulePipelineCommunicator (megatron-core 0.19.2) on Megatron's own
# HyperCommGrid ("peer") and on ours ("ours", topology_torch.compat.megatron.hyper_comm_grid;
# every other module is Megatron's). One torchrun per file and target, each with its tally.
#
#   scripts/peers/bridge_communicator.sh [ours|peer|all] [pytest args]
#
# The test file comes from /work/.mirror/NVIDIA+Megatron-LM/repo ($MEGATRON_MIRROR), extracted to
# /tmp/megatron-lm-bridge-tests-core_v0.19.0 ($MEGATRON_TREE); megatron-core 0.19.2 is the unpacked
# wheel in .venv/oracles (ORACLE=1 scripts/setup.sh). Only the launch is adapted:
# bridge_communicator_harness.py (for "ours", the test's and the communicator's import of
# megatron.core.hyper_comm_grid is our module; new_group makes gloo groups where the test and the
# communicator hard-code NCCL; stand-ins for a Triton kernel module and for the exports of the
# wheel's reduced megatron/core/__init__.py), megatron_harness.py (gloo default group, no device
# binding, outcomes per rank) and hyper_comm_grid_harness.py (WORLD_SIZE put back after a test).
# Tallies (8 gloo ranks, torch 2.13 CPU): bridge 20 of 29 for both (8 on ours before
# _gen_rank_enum), multimodule 2 of 14 for both; every other test moves CUDA tensors (.cuda(),
# device='cuda', torch.cuda.current_device()) and fails on CPU for Megatron's class too. Each run
# prints the HyperCommGrid module it used (grid.txt). Not part of CI; about 5 minutes.
# shellcheck source=_launch.sh
source "$(dirname "$0")/_launch.sh"
target="${1:-all}"
shift $(( $# > 0 ? 1 : 0 ))
tag="core_v0.19.0"
tree="${MEGATRON_TREE:-/tmp/megatron-lm-bridge-tests-$tag}"
mirror="${MEGATRON_MIRROR:-/work/.mirror/NVIDIA+Megatron-LM/repo}"
folder="tests/unit_tests/pipeline_parallel"
files=("$folder/test_bridge_communicator.py" "$folder/test_multimodule_communicator.py")
peer_extract "$mirror" "$tag" "$tree" tests/__init__.py tests/unit_tests/__init__.py \
  tests/unit_tests/test_utilities.py "$folder/__init__.py" "${files[@]}"
oracle="$(peer_oracle 0.19.2 megatron/core/pipeline_parallel/bridge_communicator.py)"

run() {  # run TARGET FILE [pytest args]: the file on 8 ranks, then the tally
  local who="$1" test_file="$2"
  shift 2
  local results name
  name="$(basename "$test_file" .py)"
  results="$(mktemp -d -t "$name-$who.XXXX")"
  peer_run "$who" "$results" "$tree" 900 \
    PEER_TARGET=peer PEER_GRID="$who" PEER_RESULTS="$results" OMP_NUM_THREADS=1 NO_VCS_VERSION=1 \
    PYTHONPATH="$(peer_path "$here" "$repo/src" "$oracle" "$tree")" -- \
    "$torchrun" --nproc-per-node 8 --master-port "$(peer_port)" \
    -m pytest "$test_file" --rootdir "$tree" -p bridge_communicator_harness -p megatron_harness \
    -p hyper_comm_grid_harness --noconftest -p no:cacheprovider -p no:randomly \
    -o addopts= -q -W ignore "$@"
  cat "$results/grid.txt" 2>/dev/null || true
  "$python" "$here/tally.py" "$results" "$name of $tag, $who"
}

case "$target" in
  ours | peer) for file in "${files[@]}"; do run "$target" "$file" "$@"; done ;;
  all) for file in "${files[@]}"; do run peer "$file" "$@"; run ours "$file" "$@"; done ;;
  *) echo "usage: $0 [ours|peer|all] [pytest args]" >&2; exit 2 ;;
esac
