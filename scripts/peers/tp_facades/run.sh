# Shared by scripts/peers/{fairscale,ezpz,ml_starter}.sh (sourced, not run): extract the peer,
# run its tests with the shim of this folder first on PYTHONPATH, print the pytest tally.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"

# peer_tree MIRROR_NAME REV [TREE]: print the work tree, extracting REV from the mirror if absent.
peer_tree() {
    local mirror="/work/.mirror/$1/repo" rev="$2" tree="${3:-}"
    if [[ -z "$tree" ]]; then
        tree="/tmp/topology-peers/$1@$rev"
        if [[ ! -d "$tree" ]]; then
            mkdir -p "$tree.partial"
            # some mirrors lack blobs of docs/assets: extract only what the tests need
            git --git-dir="$mirror" archive "$rev" "${@:4}" | tar -x -C "$tree.partial"
            mv "$tree.partial" "$tree"
        fi
    fi
    echo "$tree"
}

# run_peer PEER TREE EXTRA_PYTHONPATH TEST_PATH... : run pytest in TREE for IMPL (ours|peer).
run_peer() {
    local peer="$1" tree="$2" extra="$3"
    shift 3
    cd "$tree"
    TOPOLOGY_PEER="$peer" TOPOLOGY_PEER_IMPL="${IMPL:-ours}" \
        PYTHONPATH="$ROOT/scripts/peers/tp_facades:$ROOT/src${extra:+:$extra}" \
        "$PYTHON" -m pytest -p no:cacheprovider -p no:randomly -o addopts="" -q -rA "$@" \
        | tail -n "${TAIL:-40}"
}
