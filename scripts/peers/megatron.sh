#!/usr/bin/env bash
# Megatron-LM's own tests/unit_tests/test_parallel_state.py (8 ranks, gloo on CPU) for one
# megatron-core version, against Megatron itself ("peer"), Megatron with our install() ("installed")
# and our façade as parallel_state ("ours").
#
#   scripts/peers/megatron.sh [ours|peer|installed|all] [VERSION] [pytest args]
#
# VERSION is 0.16.1 (default; the one in .venv), 0.17.1, 0.18.2 or 0.19.2; the test files come from
# the matching tag (core_v0.16.1, core_v0.17.1, core_v0.18.2, core_v0.19.0: 0.19.2 has no tag and
# the same parallel_state) of /work/.mirror/NVIDIA+Megatron-LM/repo ($MEGATRON_MIRROR), extracted
# to /tmp/megatron-lm-tests-TAG ($MEGATRON_TREE). megatron-core itself is the installed package
# for 0.16.1, else .venv/oracles/megatron-core-VERSION on PYTHONPATH (ORACLE=1 scripts/setup.sh
# unpacks them). Only the launch is adapted (scripts/peers/megatron_harness.py: gloo instead of
# NCCL, no device binding, the peer's conftest replaced by its session cleanup, a stub for a
# training module 0.19's test utilities import); the peer's test files run unchanged. Each run
# takes minutes; $PEER_TIMEOUT (seconds, default 1800) bounds it. Not part of CI.
# shellcheck source=_launch.sh
source "$(dirname "$0")/_launch.sh"
target="${1:-all}"
version="${2:-0.16.1}"
shift $(( $# > 2 ? 2 : $# ))
# shellcheck source=megatron_tag.sh
source "$here/megatron_tag.sh"
tag="$(megatron_tag "$version")"
tree="${MEGATRON_TREE:-/tmp/megatron-lm-tests-$tag}"
mirror="${MEGATRON_MIRROR:-/work/.mirror/NVIDIA+Megatron-LM/repo}"
peer_extract "$mirror" "$tag" "$tree" tests/__init__.py tests/unit_tests/__init__.py \
  tests/unit_tests/test_utilities.py tests/unit_tests/test_parallel_state.py
oracle=""
if [[ "$version" != 0.16.1 ]]; then
  oracle="$(peer_oracle "$version" megatron/core/parallel_state.py)"
fi

run() {  # run TARGET [pytest args]: the suite on 8 ranks, then the tally
  local who="$1"
  shift
  local results
  results="$(mktemp -d -t "megatron-$version-$who.XXXX")"
  peer_run "$who" "$results" "$tree" 1800 \
    PEER_TARGET="$who" PEER_RESULTS="$results" OMP_NUM_THREADS=1 NO_VCS_VERSION=1 \
    PYTHONPATH="$(peer_path "$here" "$repo/src" "$oracle" "$tree")" -- \
    "$torchrun" --nproc-per-node 8 --master-port "$(peer_port)" \
    -m pytest tests/unit_tests/test_parallel_state.py -p megatron_harness --noconftest \
    -p no:cacheprovider -o addopts= -q -W ignore "$@"
  "$python" "$here/tally.py" "$results" "megatron-core $version, $who"
}

peer_targets "$target" "[ours|peer|installed|all] [VERSION] [pytest args]" "peer installed ours" "$@"
