#!/usr/bin/env bash
# ezpz's own tests of ezpz.tp (v0.26.1), unchanged, against our façade (or ezpz itself), on CPU.
# Not part of CI (it reads the mirror).
#
#   scripts/peers/ezpz.sh [WORK_TREE]            # our façade
#   IMPL=peer scripts/peers/ezpz.sh [WORK_TREE]  # ezpz itself
#
# WORK_TREE defaults to ezpz v0.26.1 (src, tests) extracted from /work/.mirror into /tmp.
source "$(dirname "${BASH_SOURCE[0]}")/tp_facades/run.sh"
TREE="$(peer_tree saforem2+ezpz v0.26.1 "${1:-}" src tests pyproject.toml)"
run_peer ezpz "$TREE" "$TREE/src" tests/test_tp.py
