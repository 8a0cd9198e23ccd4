#!/usr/bin/env bash
# ml-starter's own model-parallel test, unchanged, against our façades (ml.utils.parallel,
# ml.models.parallel, ml.models.lora) or ml-starter itself, on CPU with gloo (4 ranks, as the
# test itself asks). Not part of CI (it reads the mirror).
#
#   scripts/peers/ml_starter.sh [WORK_TREE]            # our façade
#   IMPL=peer scripts/peers/ml_starter.sh [WORK_TREE]  # ml-starter itself
#
# WORK_TREE defaults to ml-starter's HEAD extracted from /work/.mirror into /tmp.
#
# ml-starter imports pure-python packages the project does not need (omegaconf, psutil, tqdm);
# install them once into a throwaway folder, never into .venv, and the script puts it on
# PYTHONPATH (PEER_DEPS, default /tmp/peerdeps):
#
#   .venv/bin/pip install --target /tmp/peerdeps omegaconf psutil tqdm
source "$(dirname "${BASH_SOURCE[0]}")/tp_facades/run.sh"
TREE="$(peer_tree maximilianmbeck+ml-starter HEAD "${1:-}")"
PEER_DEPS="${PEER_DEPS:-/tmp/peerdeps}"
if [[ ! -d "$PEER_DEPS/omegaconf" ]]; then
    echo "missing $PEER_DEPS/omegaconf: .venv/bin/pip install --target $PEER_DEPS omegaconf psutil tqdm" >&2
    exit 2
fi
run_peer ml_starter "$TREE" "$TREE:$PEER_DEPS" tests/utils/test_parallel.py
