#!/usr/bin/env bash
# torchtitan's own tests/unit_tests/test_parallel_dims.py (torchtitan 0.3.0: the release/0.3
# branch at 4f9e9a47, whose torchtitan/distributed/parallel_dims.py is byte for byte the 0.3.0
# wheel's; the mirror has no v0.3.0 tag) against our topology_torch.compat.torchtitan ("ours")
# or torchtitan's own ParallelDims ("peer"), on CPU with gloo (its 8-rank classes spawn 8 ranks).
#
#   scripts/peers/torchtitan.sh [ours|peer|all] [pytest args]
#   TORCHTITAN_REF=HEAD scripts/peers/torchtitan.sh   # the mirror's main (b5bcd76: ours 19 of 19)
#
# The test file and torchtitan's package (the test file imports its config, FSDP, SPMD and
# model modules) come from /work/.mirror/pytorch+torchtitan/repo ($TORCHTITAN_MIRROR) at the ref,
# extracted to /tmp/topology-peers/torchtitan@REF; the pure-python packages torchtitan imports
# and this venv lacks (spmd_types 0.2.3, tyro, docstring_parser, typeguard, and torch's test
# helpers' expecttest) are installed once, without dependencies, into $PEER_DEPS
# (/tmp/topology-peers/mesh-deps), never into .venv. Only the launch is adapted
# (mesh_facades/sitecustomize.py: the module alias and a stub for torchtitan's Triton kernels;
# peer_outcomes.py: the outcomes for tally.py). In scope: the six classes that test ParallelDims
# (validation, properties, mesh operations on 1 and 8 ranks, SPMD meshes, 1-D meshes). Out of
# scope, deselected unless ALL=1: TestSpmdLayout (torchtitan's SpmdLayout/spmd_types
# redistribution, no ParallelDims) and TestSingleGPUMixedPrecisionFSDP (apply_fsdp on a Llama
# model, no ParallelDims). Tallies (torch 2.13 CPU): peer 19 of 19, ours 18 of 19: the failure,
# test_expert_parallelism_validation, builds ep=3 over dp_shard*cp*tp = 2, which our facade
# refuses at construction as torchtitan main does (#4258; main's test asserts that error) and
# 0.3.0 only inside build_mesh. Not part of CI; its 8-rank classes spawn 8 processes each: 14
# minutes per target on the 2-core machine under a load average of 18.
# shellcheck source=_launch.sh
source "$(dirname "$0")/_launch.sh"
target="${1:-all}"
shift $(( $# > 0 ? 1 : 0 ))
ref="${TORCHTITAN_REF:-4f9e9a47d49dfbcac960857dd67748c67aecd2e5}"
mirror="${TORCHTITAN_MIRROR:-/work/.mirror/pytorch+torchtitan/repo}"
tree="${TORCHTITAN_TREE:-/tmp/topology-peers/torchtitan@$ref}"
deps="${PEER_DEPS:-/tmp/topology-peers/mesh-deps}"
test_file="tests/unit_tests/test_parallel_dims.py"
if [[ ! -f "$tree/$test_file" ]]; then
  mkdir -p "$tree.partial"
  # the mirror lacks some blobs of tests/assets; git names them and archives the rest
  git --git-dir="$mirror" archive "$ref" torchtitan tests/__init__.py tests/unit_tests/__init__.py \
    "$test_file" 2>/dev/null | tar -x -C "$tree.partial"
  mv "$tree.partial" "$tree"
fi
if [[ ! -d "$deps/spmd_types" || ! -d "$deps/expecttest" ]]; then
  "$python" -m pip install -q --no-deps --target "$deps" spmd_types==0.2.3 tyro==1.0.17 \
    docstring_parser typeguard expecttest
fi
out_of_scope=(TestSpmdLayout TestSingleGPUMixedPrecisionFSDP)
deselect=()
if [[ "${ALL:-0}" != 1 ]]; then
  for name in "${out_of_scope[@]}"; do deselect+=(--deselect "$test_file::$name"); done
fi

run() {  # run TARGET [pytest args]: the file, then the tally
  local who="$1"
  shift
  local results
  results="$(mktemp -d -t "torchtitan-$who.XXXX")"
  peer_run "$who" "$results" "$tree" 900 \
    TOPOLOGY_PEER=torchtitan TOPOLOGY_PEER_IMPL="$who" PEER_RESULTS="$results" \
    PYTHONPATH="$(peer_path "$here/mesh_facades" "$here" "$repo/src" "$tree" "$deps")" -- \
    "$python" -m pytest "$test_file" --rootdir "$tree" \
    -p peer_outcomes -p no:cacheprovider -p no:randomly -o addopts= -q -W ignore \
    "${deselect[@]}" "$@"
  "$python" "$here/tally.py" "$results" "torchtitan ParallelDims tests at ${ref:0:8}, $who"
}

peer_targets "$target" "[ours|peer|all] [pytest args]" "peer ours" "$@"
