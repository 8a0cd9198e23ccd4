#!/usr/bin/env bash
# Megatron-LM's own tests/unit_tests/test_process_groups_config.py (gloo on CPU) for one
# megatron-core version, against Megatron itself ("peer"), Megatron with our install()
# ("installed") and our façade as parallel_state ("ours": Megatron's ProcessGroupCollection reads
# our groups through its use_mpu_process_groups).
#
#   scripts/peers/megatron_pgc.sh [ours|peer|installed|all] [VERSION] [pytest args]
#
# VERSION is 0.19.2 (default) or 0.18.2 (the versions whose collection has the all-gather fields;
# 0.19.2 its 27 fields), 0.17.1 or 0.16.1; the test file comes from the matching tag
# (core_v0.19.0 for 0.19.2) of /work/.mirror/NVIDIA+Megatron-LM/repo ($MEGATRON_MIRROR),
# extracted to /tmp/megatron-lm-pgc-tests-TAG ($MEGATRON_TREE); megatron-core is the installed
# package for 0.16.1, else .venv/oracles/megatron-core-VERSION on PYTHONPATH (scripts/setup.sh
# unpacks 0.19.2; ORACLE=1 the others). $NPROC ranks (default 8, as Megatron's CI) run under
# torchrun. Only the launch is adapted: scripts/peers/megatron_harness.py (see there) and
# scripts/peers/megatron_mocker.py (a `mocker` fixture from unittest.mock where pytest-mock is
# not installed); the peer's test file runs unchanged. Not part of CI: the test file lives only in
# the Megatron-LM mirror.
# shellcheck source=_launch.sh
source "$(dirname "$0")/_launch.sh"
target="${1:-all}"
version="${2:-0.19.2}"
shift $(( $# > 2 ? 2 : $# ))
# shellcheck source=megatron_tag.sh
source "$here/megatron_tag.sh"
tag="$(megatron_tag "$version")"
tree="${MEGATRON_TREE:-/tmp/megatron-lm-pgc-tests-$tag}"
mirror="${MEGATRON_MIRROR:-/work/.mirror/NVIDIA+Megatron-LM/repo}"
suite=tests/unit_tests/test_process_groups_config.py
peer_extract "$mirror" "$tag" "$tree" tests/__init__.py tests/unit_tests/__init__.py \
  tests/unit_tests/test_utilities.py "$suite"
oracle=""
if [[ "$version" != 0.16.1 ]]; then
  oracle="$(peer_oracle "$version" megatron/core/parallel_state.py)"
fi

run() {  # run TARGET [pytest args]: the suite on $NPROC ranks, then the tally
  local who="$1"
  shift
  local results
  results="$(mktemp -d -t "megatron-pgc-$version-$who.XXXX")"
  peer_run "$who" "$results" "$tree" 600 \
    PEER_TARGET="$who" PEER_RESULTS="$results" OMP_NUM_THREADS=1 NO_VCS_VERSION=1 \
    PYTHONPATH="$(peer_path "$here" "$repo/src" "$oracle" "$tree")" -- \
    "$torchrun" --nproc-per-node "${NPROC:-8}" --master-port "$(peer_port)" \
    -m pytest "$suite" -p megatron_harness -p megatron_mocker \
    --noconftest -p no:cacheprovider -o addopts= -q -W ignore "$@"
  "$python" "$here/tally.py" "$results" "megatron-core $version, $who"
}

peer_targets "$target" "[ours|peer|installed|all] [VERSION] [pytest args]" "peer installed ours" "$@"
