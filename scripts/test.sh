#!/usr/bin/env bash
# The whole test suite: lint, types, then every test (core, CLI, cost model, real gloo worlds).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
# One command per line: under `set -e` a failing command before `&&` does not stop the script.
echo "== ruff"
ruff check src tests benchmarks
ruff format --check src tests benchmarks
echo "== mypy --strict (topology)"
mypy
echo "== pytest"
# Whole files per worker: a module-scoped world starts once (tests/conftest.py: SLOW_FILES).
python -m pytest -n 2 --dist loadfile -q "$@"
