#!/usr/bin/env bash
# fairscale's own model-parallel tests, unchanged, against our façade (or fairscale itself), on
# CPU with gloo. Not part of CI (it reads the mirror).
#
#   scripts/peers/fairscale.sh [WORK_TREE]            # our façade
#   IMPL=peer scripts/peers/fairscale.sh [WORK_TREE]  # fairscale itself
#   TOPOLOGY_PEER_WORLD_SIZES=1,2,4,8 scripts/peers/fairscale.sh   # world sizes (default 1,2,4)
#
# WORK_TREE defaults to fairscale's HEAD extracted from /work/.mirror into /tmp/topology-peers.
source "$(dirname "${BASH_SOURCE[0]}")/tp_facades/run.sh"
TREE="$(peer_tree facebookresearch+fairscale HEAD "${1:-}")"
export TOPOLOGY_PEER_WORLD_SIZES="${TOPOLOGY_PEER_WORLD_SIZES:-1,2,4}"
run_peer fairscale "$TREE" "$TREE" \
    tests/nn/model_parallel/test_initialize.py tests/nn/model_parallel/test_layers.py
