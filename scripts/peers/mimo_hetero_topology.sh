#!/usr/bin/env bash
# Megatron-LM's own tests/unit_tests/test_mimo_hetero_topology.py (main at d98e8a64dd, 2026-08-22;
# 8 ranks, gloo on CPU): Megatron's example MIMO topology (examples/mimo/training/topology.py) and
# its HyperCommGrid ("peer"), and ours ("ours": topology_torch.compat.megatron.mimo and
# .hyper_comm_grid; every other module is megatron-core 0.19.2's). One torchrun per target, each
# with its tally.
#
#   scripts/peers/mimo_hetero_topology.sh [ours|peer|all] [pytest args]
#
# The test file, the example module and the test utilities come from
# /work/.mirror/NVIDIA+Megatron-LM/repo ($MEGATRON_MIRROR), extracted to
# /tmp/megatron-lm-mimo-tests-$commit ($MEGATRON_TREE); megatron-core 0.19.2 is the unpacked wheel
# in .venv/oracles (ORACLE=1 scripts/setup.sh). Only the launch is adapted:
# mimo_hetero_topology_harness.py (for "ours", the example module is ours; torch.cuda.device_count
# answers the world size so the 8-GPU class runs on 8 gloo ranks), bridge_communicator_harness.py
# (our HyperCommGrid for "ours"; NCCL groups made as gloo), megatron_harness.py (gloo default
# group, outcomes per rank; a stand-in torch.distributed.ProcessGroupNCCL on a CPU torch for the
# file's fixture to replace). Tallies (8 gloo ranks, torch 2.13 CPU): peer 18 of 18, ours 17 of 18
# (without _get_pg_options and _validate_grid_layout the file did not import). The one failure
# reads the example module's private internals:
#   test_high_priority_options_are_wired_to_each_module_grid monkeypatches the module's
#   HyperCommGrid, _validate_grid_layout, pg_collection_from_grid and build_schedule_pg_collection
#   and counts each grid's create_pg(..., pg_options=) calls; ours makes every module's groups in
#   one schedule (no create_pg per family) and has no pg_collection_from_grid.
# Not part of CI; about 2.5 minutes for both targets on 2 cores.
# shellcheck source=_launch.sh
source "$(dirname "$0")/_launch.sh"
target="${1:-all}"
shift $(( $# > 0 ? 1 : 0 ))
commit="d98e8a64ddf34856e74b24714e3bedb2f5a39553"
tree="${MEGATRON_TREE:-/tmp/megatron-lm-mimo-tests-${commit:0:10}}"
mirror="${MEGATRON_MIRROR:-/work/.mirror/NVIDIA+Megatron-LM/repo}"
test_file="tests/unit_tests/test_mimo_hetero_topology.py"
peer_extract "$mirror" "$commit" "$tree" tests/__init__.py tests/unit_tests/__init__.py \
  tests/unit_tests/test_utilities.py "$test_file" examples/__init__.py examples/mimo/__init__.py \
  examples/mimo/training/__init__.py examples/mimo/training/topology.py
oracle="$(peer_oracle 0.19.2 megatron/core/models/mimo/config/role.py)"

run() {  # run TARGET [pytest args]: the file on 8 ranks, then the tally
  local who="$1"
  shift
  local results
  results="$(mktemp -d -t "mimo_hetero_topology-$who.XXXX")"
  peer_run "$who" "$results" "$tree" 600 \
    PEER_TARGET=peer PEER_GRID="$who" PEER_RESULTS="$results" OMP_NUM_THREADS=1 NO_VCS_VERSION=1 \
    PYTHONPATH="$(peer_path "$here" "$repo/src" "$oracle" "$tree")" -- \
    "$torchrun" --nproc-per-node 8 --master-port "$(peer_port)" \
    -m pytest "$test_file" --rootdir "$tree" -p bridge_communicator_harness -p megatron_harness \
    -p mimo_hetero_topology_harness --noconftest -p no:cacheprovider -p no:randomly \
    -o addopts= -q -W ignore "$@"
  cat "$results/grid.txt" 2>/dev/null || true
  "$python" "$here/tally.py" "$results" "test_mimo_hetero_topology at ${commit:0:10}, $who"
}

peer_targets "$target" "[ours|peer|all] [pytest args]" "peer ours" "$@"
