#!/usr/bin/env bash
# The `topology` command on seed 004's layout (16 GPUs, tp2 pp4), a pre-launch check of a
# 4096-GPU job on 8-GPU nodes (one layout that fails with exit 1, one that passes), and a job on a
# ragged NVL72 allocation: torchrun's host order fails the check, `place`'s order passes.
# Needs `topology` on PATH. Each command is printed before it runs; an expected exit 1 is shown,
# not fatal, and any other unexpected exit code stops the demo.
set -uo pipefail

run() {
    local expect=$1
    shift
    echo
    echo "\$ $*"
    "$@"
    local code=$?
    echo "[exit $code]"
    if [ "$code" -ne "$expect" ]; then
        echo "demo_cli.sh: expected exit $expect from: $*" >&2
        exit 1
    fi
}

SEED_004=(--world-size 16 --tp 2 --pp 4 --gpus-per-node 8)

run 0 topology show "${SEED_004[@]}" --no-color
run 0 topology rank 5 "${SEED_004[@]}"
run 0 topology groups dp --world-size 16 --tp 2 --pp 4

# 4096 GPUs on 512 nodes of 8: tp8 laid out data-parallel-first puts every tp group on 8 nodes.
run 1 topology check --world-size 4096 --tp 8 --pp 4 --order dp-tp-cp-ep-pp \
    --gpus-per-node 8 --nodes 512
# The same job in Megatron's order keeps tp inside the node.
run 0 topology check --world-size 4096 --tp 8 --pp 4 --gpus-per-node 8 --nodes 512

# The hosts a job really got: 4 NVL72 racks with 18, 18, 16 and 12 usable 4-GPU trays, named
# node1..node64. torchrun numbers them in string order (node1, node10, ...), which puts 6 of the
# 32 tp groups across two racks: an error. `place` gives a host order that keeps them in.
RACKS=(--world-size 256 --tp 8 --pp 4 --allocation tests/data/allocation/cli/ragged_nvl72.toml)
HOSTS="$(mktemp)"
trap 'rm -f "$HOSTS"' EXIT
run 1 topology check "${RACKS[@]}" --launcher-order lexicographic
run 0 topology place "${RACKS[@]}" --launcher-order lexicographic --write-hostfile "$HOSTS"
run 0 topology check "${RACKS[@]}" --host-order "$HOSTS"
echo
echo "demo_cli.sh: all commands gave the expected exit codes"
