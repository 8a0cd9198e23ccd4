#!/usr/bin/env bash
# Megatron-LM's own tests/unit_tests/test_parallel_state.py (tag core_v0.16.1, 8 ranks, gloo on
# CPU) against our façade ("ours") and against megatron-core itself ("peer").
#
#   scripts/peers/megatron.sh [ours|peer|both] [WORKTREE]
#
# WORKTREE is a Megatron-LM checkout; by default core_v0.16.1 is extracted from
# /work/.mirror/NVIDIA+Megatron-LM/repo into /tmp/megatron-lm-core_v0.16.1. Only the launch is
# adapted (scripts/peers/megatron_harness.py: gloo instead of NCCL, no device binding, the
# peer's conftest replaced by its session cleanup); the peer's test files run unchanged.
# "peer" needs megatron-core importable (.venv has it: pip install --no-deps megatron-core==0.16.1).
# Extra arguments after WORKTREE go to pytest (e.g. -k rank_generator). Not part of CI.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
target="${1:-both}"
tag="core_v0.16.1"
tree="${2:-/tmp/megatron-lm-$tag}"
shift $(( $# > 2 ? 2 : $# ))
mirror="${MEGATRON_MIRROR:-/work/.mirror/NVIDIA+Megatron-LM/repo}"
if [[ ! -f "$tree/tests/unit_tests/test_parallel_state.py" ]]; then
  mkdir -p "$tree"
  git --git-dir="$mirror" archive "$tag" megatron tests pyproject.toml | tar -x -C "$tree"
fi
python="$repo/.venv/bin/python"
torchrun="$repo/.venv/bin/torchrun"

run() {  # run TARGET [pytest args]: the suite on 8 ranks, then the tally
  local who="$1"
  shift
  local results
  results="$(mktemp -d -t "megatron-$who.XXXX")"
  local port
  port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  (
    cd "$tree"
    PEER_TARGET="$who" PEER_RESULTS="$results" OMP_NUM_THREADS=1 \
    PYTHONPATH="$here:$repo/src:$tree${PYTHONPATH:+:$PYTHONPATH}" \
      timeout "${PEER_TIMEOUT:-1800}" "$torchrun" --nproc-per-node 8 --master-port "$port" \
      -m pytest tests/unit_tests/test_parallel_state.py -p megatron_harness --noconftest \
      -p no:cacheprovider -o addopts= -q -W ignore "$@" >"$results/log.txt" 2>&1
  ) || echo "($who: pytest exited with $?; log: $results/log.txt)"
  "$python" "$here/tally.py" "$results" "$who"
}

case "$target" in
  ours | peer) run "$target" "$@" ;;
  both) run peer "$@"; run ours "$@" ;;
  *) echo "usage: $0 [ours|peer|both] [WORKTREE] [pytest args]" >&2; exit 2 ;;
esac
