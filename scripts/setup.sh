#!/usr/bin/env bash
# Creates .venv (once) and installs rank-topology with everything the demo and the tests use.
# Every version is pinned by constraints.txt (tools, test dependencies, build backend), so a clone
# resolves the same versions next month. torch is the CPU build of 2.13.0, installed first: the
# `[torch]` extra has no upper cap, so pip then finds it satisfied and never pulls a CUDA build.
# Safe to run again: it does nothing when pyproject.toml, constraints.txt and this script are
# unchanged since the last successful run.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.rank-topology-setup
want=$(cat pyproject.toml constraints.txt scripts/setup.sh | cksum)-oracle${ORACLE:-0}
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
# PIP_CONSTRAINT (not -c) so that the isolated build environment is pinned too.
export PIP_CONSTRAINT="$PWD/constraints.txt"
pip_install() {
  .venv/bin/python -m pip --disable-pip-version-check -q install "$@" 2>&1 |
    { grep -v "^WARNING: Location" || true; }
}
# The HTML picture's test clicks ranks in a real headless browser: Debian's Chromium and its
# driver (the tests skip without them, except under CI where they fail).
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        chromium chromium-driver; } >/dev/null
  else
    echo "note: install Debian's chromium and chromium-driver to run the browser test" >&2
  fi
fi
pip_install "torch==2.13.0"
pip_install -e ".[torch,test,cli,plot,docs]"
# Optional differential oracle for the tests: Megatron-core's parallel_state (never a dependency of
# the library; --no-deps keeps it from pulling anything but the two small packages it imports).
pip_install --no-deps "megatron-core==0.16.1" numpy einops
# Newer megatron-core releases as oracles (0.17 and later ship only cp312+ wheels and import
# triton at the top): each wheel is unpacked into .venv/oracles/megatron-core-VERSION with its
# megatron/core/__init__.py reduced to `from megatron.core import parallel_state`, so that
# parallel_state, hyper_comm_grid and process_groups_config import on Python 3.11 with
# PYTHONPATH=.venv/oracles/megatron-core-VERSION. 0.19.2 always (the GTP differential test);
# ORACLE=1 adds 0.17.1 and 0.18.2 (scripts/peers/megatron.sh). Never a dependency of the library.
oracle_versions="0.19.2"
[ "${ORACLE:-0}" = 1 ] && oracle_versions="0.17.1 0.18.2 0.19.2"
for version in $oracle_versions; do
  folder=.venv/oracles/megatron-core-$version
  [ -f "$folder/megatron/core/parallel_state.py" ] && continue
  wheels=$(mktemp -d)
  PIP_CONSTRAINT= .venv/bin/python -m pip --disable-pip-version-check -q download --no-deps \
    --only-binary=:all: --python-version 3.12 --implementation cp -d "$wheels" \
    "megatron-core==$version" 2>&1 | { grep -v "^WARNING: Location" || true; }
  rm -rf "$folder" && mkdir -p "$folder"
  .venv/bin/python -m zipfile -e "$wheels"/megatron_core-"$version"-*.whl "$folder"
  echo "from megatron.core import parallel_state" > "$folder/megatron/core/__init__.py"
  rm -rf "$wheels"
done
# Megatron-Bridge's Hugging Face <-> Megatron name mappings, read as source text by
# tests/test_hf_mapping_bridge.py (its wheel is py3.12-only and imports megatron-core 0.19 at the
# top, so it is unpacked, never imported). Never a dependency of the library.
bridge=.venv/oracles/megatron-bridge-0.6.2
if [ ! -f "$bridge/megatron/bridge/models/deepseek/common.py" ]; then
  wheels=$(mktemp -d)
  PIP_CONSTRAINT= .venv/bin/python -m pip --disable-pip-version-check -q download --no-deps \
    --only-binary=:all: --python-version 3.12 --implementation cp -d "$wheels" \
    "megatron-bridge==0.6.2" 2>&1 | { grep -v "^WARNING: Location" || true; }
  rm -rf "$bridge" && mkdir -p "$bridge"
  .venv/bin/python -m zipfile -e "$wheels"/megatron_bridge-0.6.2-*.whl "$bridge"
  rm -rf "$wheels"
fi
.venv/bin/python -W ignore -c "import torch, topology, topology_torch, hypothesis, megatron.core, pdoc, argcomplete, selenium"
.venv/bin/ruff --version >/dev/null
.venv/bin/mypy --version >/dev/null
echo "$want" > "$stamp"
