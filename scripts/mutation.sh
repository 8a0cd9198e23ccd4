#!/usr/bin/env bash
# Mutation score of the pure core: mutmut mutates the core modules listed under [tool.mutmut] in
# pyproject.toml and runs the core tests (tests/ without torch, CLI, cost, fuzz and bound tests)
# against each mutant, with the derandomized `mutation` Hypothesis profile (few examples per test)
# so every run gives the same verdict in bearable time.
#
#   bash scripts/mutation.sh                       # every core module (about 3,600 mutants)
#   bash scripts/mutation.sh 'topology._preflight.rules.*'   # only these mutants (globs passed to mutmut run)
#
# Prints one line for the mutants that the globs select: killed (timeouts count as killed, as in
# mutmut's badge) / mutants tested. Results accumulate in mutants/ across split runs; set
# MUTMUT_FRESH=1 to start from scratch. The log is mutants/run.log; `mutmut results` lists the
# survivors, `mutmut show NAME` one. MUTMUT_CHILDREN (default 2) bounds the parallel test processes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [[ ! -x .venv/bin/mutmut ]]; then
    PIP_CONSTRAINT="$PWD/constraints.txt" .venv/bin/python -m pip -q install mutmut
fi
export CI=true HYPOTHESIS_PROFILE=mutation
if [[ "${MUTMUT_FRESH:-0}" == 1 ]]; then
    rm -rf mutants
fi
mkdir -p mutants
if ! nice -n 10 .venv/bin/mutmut run --max-children "${MUTMUT_CHILDREN:-2}" "$@" \
    >mutants/run.log 2>&1; then
    echo "mutation.sh: mutmut run failed; see mutants/run.log" >&2
    tail -n 20 mutants/run.log >&2
    exit 1
fi
.venv/bin/mutmut results --all true >mutants/results.txt
.venv/bin/python - "$@" <<'PY'
import fnmatch
import sys
from collections import Counter

patterns = sys.argv[1:] or ["*"]
counts: Counter[str] = Counter()
for line in open("mutants/results.txt"):
    name, _, status = line.strip().rpartition(": ")
    if name and any(fnmatch.fnmatch(name, p) for p in patterns):
        counts[status] += 1
killed = counts["killed"] + counts["timeout"]
tested = killed + counts["survived"] + counts["suspicious"]
print(
    f"mutation score ({' '.join(patterns)}): {killed}/{tested} = {100 * killed / max(tested, 1):.1f}% "
    f"(killed {counts['killed']}, timeout {counts['timeout']}, survived {counts['survived']}, "
    f"suspicious {counts['suspicious']}, no tests {counts['no tests']}, "
    f"not checked {counts['not checked']})"
)
PY
