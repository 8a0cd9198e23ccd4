#!/usr/bin/env bash
# Megatron-LM's own tests/unit_tests/test_hyper_comm_grid.py (tag core_v0.19.0; 8 ranks, gloo on
# CPU) against megatron-core 0.19.2's HyperCommGrid ("peer") and ours ("ours",
# topology_torch.compat.megatron.hyper_comm_grid).
#
#   scripts/peers/hyper_comm_grid.sh [ours|peer|all] [pytest args]
#
# The test file comes from /work/.mirror/NVIDIA+Megatron-LM/repo ($MEGATRON_MIRROR), extracted to
# .venv/oracles/megatron-lm-tests-core_v0.19.0 ($MEGATRON_TREE), where
# tests/torch/test_hyper_comm_grid_peer.py also reads it; megatron-core 0.19.2 is the unpacked wheel
# in .venv/oracles (scripts/setup.sh). Only the launch is adapted (megatron_harness.py: gloo
# instead of NCCL; hyper_comm_grid_harness.py: the file's import points at our class, and the
# WORLD_SIZE a failing test leaves is put back). Of its 47 tests, 6 need NCCL and CUDA devices
# (deselected unless GPU=1); of the other 41, 17 use only the public API and 24 read Megatron's
# private attributes or mock torch.distributed.new_subgroups_by_enumeration (listed with the
# reason in tests/torch/test_hyper_comm_grid_peer.py). Tallies (8 gloo ranks, torch 2.13 CPU, the
# 6 deselected): peer 41 of 41, ours 27 of 41 (the 14 others read _pgs/_views or mock
# new_subgroups_by_enumeration). Not part of CI; about 2 minutes.
# shellcheck source=_launch.sh
source "$(dirname "$0")/_launch.sh"
target="${1:-all}"
shift $(( $# > 0 ? 1 : 0 ))
tag="core_v0.19.0"
tree="${MEGATRON_TREE:-$repo/.venv/oracles/megatron-lm-tests-$tag}"
mirror="${MEGATRON_MIRROR:-/work/.mirror/NVIDIA+Megatron-LM/repo}"
test_file="tests/unit_tests/test_hyper_comm_grid.py"
peer_extract "$mirror" "$tag" "$tree" tests/__init__.py tests/unit_tests/__init__.py "$test_file"
# pytest names a test by its path relative to --rootdir, which it takes as given; through the
# .venv symlink that path is not under the physical one pytest collects from, the file's part of
# every test ID came out empty, and no --deselect below matched: give the physical path.
tree="$(cd "$tree" && pwd -P)"
oracle="$(peer_oracle 0.19.2 megatron/core/hyper_comm_grid.py)"
# NCCL groups or CUDA tensors: these fail on CPU for Megatron's class too (and leave its ranks out
# of step, so the next collective hangs); run them on GPUs with GPU=1.
gpu_only=(process_group_creation multi_dimensional_groups all_reduce different_world_sizes
  rank_enumeration_verification registered_view)
deselect=()
if [[ "${GPU:-0}" != 1 ]]; then
  for name in "${gpu_only[@]}"; do
    deselect+=(--deselect "$test_file::TestHyperCommGridIntegration::test_real_distributed_$name")
  done
fi

run() {  # run TARGET [pytest args]: the file on 8 ranks, then the tally
  local who="$1"
  shift
  local results path
  results="$(mktemp -d -t "hyper-comm-grid-$who.XXXX")"
  path="$(peer_path "$here" "$repo/src" "$tree")"
  [[ "$who" == peer ]] && path="$oracle:$path"
  peer_run "$who" "$results" "$tree" 600 \
    PEER_TARGET="$who" PEER_RESULTS="$results" OMP_NUM_THREADS=1 PYTHONPATH="$path" -- \
    "$torchrun" --nproc-per-node 8 --master-port "$(peer_port)" \
    -m pytest "$test_file" --rootdir "$tree" -p megatron_harness -p hyper_comm_grid_harness \
    --noconftest -p no:cacheprovider -p no:randomly -o addopts= -q -W ignore "${deselect[@]}" "$@"
  "$python" "$here/tally.py" "$results" "HyperCommGrid tests of $tag, $who"
}

peer_targets "$target" "[ours|peer|all] [pytest args]" "peer ours" "$@"
