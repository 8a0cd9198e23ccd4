#!/usr/bin/env bash
# Runs the test suite (tests/torch and the core tests) against another torch, in its own venv.
#
#   bash scripts/compat.sh 2.11.0                 # every test under tests/
#   bash scripts/compat.sh 2.14.1 tests/torch     # only the torch tests
#   WORKERS=2 bash scripts/compat.sh 2.12.1       # pytest-xdist workers (default 1)
#
# Creates .venv-torch-VERSION (git-ignored) once, installs torch==VERSION there (the CPU build
# where the registry has one, as for 2.13.0; else the registry's CUDA build, several GB), then the
# package with [test] and the megatron-core 0.16.1 oracle at the versions of constraints.txt
# (torch's own pin left out), and prints a tally line: "torch VERSION: N passed, N failed, ...".
# By hand only, never in CI. The README's "Versions tested" table holds each run's result.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: bash scripts/compat.sh TORCH_VERSION [pytest arguments]}
shift
[ $# -gt 0 ] || set -- tests
PYTHON=${PYTHON:-python3}
venv=.venv-torch-$version
[ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv"
pip_install() {
  "$venv/bin/python" -m pip --disable-pip-version-check -q install "$@" 2>&1 |
    { grep -v "^WARNING: Location" || true; }
}
stamp=$venv/.rank-topology-compat
want=$(cat pyproject.toml constraints.txt scripts/compat.sh | cksum)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  if [ "$("$venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])' \
    2>/dev/null)" != "$version" ]; then
    # torch with the dependencies it asks for (torch 2.11 wants setuptools<82, which the project
    # pins higher): an empty constraints file stands in for the project's and the machine's pins.
    : >"$venv/no-constraints.txt"
    PIP_CONSTRAINT="$PWD/$venv/no-constraints.txt" pip_install "torch==$version"
  fi
  # Then the project's pins, less those of what torch brought (PIP_CONSTRAINT, not -c, so that
  # the isolated build environment is pinned too).
  "$venv/bin/python" -m pip --disable-pip-version-check list --format=freeze 2>/dev/null |
    sed 's/==.*//' | tr 'A-Z_' 'a-z-' >"$venv/installed.txt"
  while IFS= read -r line; do
    name=$(echo "${line%%==*}" | tr 'A-Z_' 'a-z-')
    grep -qx "$name" "$venv/installed.txt" || echo "$line"
  done <constraints.txt >"$venv/constraints.txt"
  PIP_CONSTRAINT="$PWD/$venv/constraints.txt" pip_install -e ".[test]"
  PIP_CONSTRAINT="$PWD/$venv/constraints.txt" pip_install --no-deps "megatron-core==0.16.1" \
    numpy einops
  echo "$want" >"$stamp"
fi
"$venv/bin/python" -c 'import torch; print(f"torch {torch.__version__}, cuda {torch.version.cuda}")'
log=$(mktemp)
set +e
"$venv/bin/python" -m pytest -q -p no:randomly -n "${WORKERS:-1}" "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
tally=$(grep -E '^=* *[0-9]+ (passed|failed)' "$log" | tail -1 | sed 's/=//g; s/ in [0-9.]*s.*//')
echo "torch $version: ${tally# }"
rm -f "$log"
exit "$status"
