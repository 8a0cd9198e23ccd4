#!/usr/bin/env bash
# The `topology` command on seed 004's layout (16 GPUs, tp2 pp4) and a pre-launch check of a
# 4096-GPU job on 8-GPU nodes: one layout that fails (exit 1), one that passes (exit 0).
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
echo
echo "demo_cli.sh: all commands gave the expected exit codes"
