#!/usr/bin/env bash
# Mutation score of the pure core: mutmut mutates the core modules listed under [tool.mutmut] in
# pyproject.toml and runs the core tests (tests/ without torch, CLI, cost, fuzz and bound tests)
# against each mutant, with the derandomized `mutation` Hypothesis profile (few examples per test,
# fastest tests first: tests/conftest.py) so every run gives the same verdict in bearable time.
#
#   bash scripts/mutation.sh                       # every core module (about 7,800 mutants: hours)
#   bash scripts/mutation.sh 'topology._preflight.rules.*'   # only these mutants (globs passed to mutmut run)
#   MUTMUT_SAMPLE=0.1 bash scripts/mutation.sh     # a seeded 10% sample of the mutants not run yet
#
# Prints a table per module (scripts/mutation_score.py): killed (timeouts count as killed, as in
# mutmut's badge) / mutants; `survived`, `suspicious` and `no tests` count against the score.
# Results accumulate in mutants/ across runs, so a long run can be split: run some modules, then
# sample the rest; the table then says per module whether its score is exact or estimated from
# the sample (with a 95% interval). MUTMUT_SEED (default 1) seeds the sample. Set MUTMUT_FRESH=1
# to start from scratch. The log is mutants/run.log; `mutmut results` lists the survivors,
# `mutmut show NAME` one. MUTMUT_CHILDREN (default 2) bounds the parallel test processes.
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
# The differential tests find megatron-core's unpacked oracles under the repository's .venv.
ln -sfn ../.venv mutants/.venv
names=("$@")
if [[ -n "${MUTMUT_SAMPLE:-}" ]]; then
    .venv/bin/mutmut results --all true >mutants/results.txt 2>/dev/null || true
    if [[ ! -s mutants/results.txt ]]; then
        echo "mutation.sh: MUTMUT_SAMPLE samples the mutants of an earlier run; run one module" \
            "first, e.g. bash scripts/mutation.sh 'topology._megatron.rank_info.*'" >&2
        exit 2
    fi
    mapfile -t names < <(.venv/bin/python scripts/mutation_score.py mutants/results.txt \
        --pick "$MUTMUT_SAMPLE" --seed "${MUTMUT_SEED:-1}" "$@")
    echo "mutation.sh: sampling ${#names[@]} mutants not run yet (list: mutants/sample.txt)"
    if [[ ${#names[@]} -eq 0 ]]; then
        .venv/bin/python scripts/mutation_score.py mutants/results.txt "$@"
        exit 0
    fi
fi
if ! nice -n 10 .venv/bin/mutmut run --max-children "${MUTMUT_CHILDREN:-2}" "${names[@]}" \
    >mutants/run.log 2>&1; then
    echo "mutation.sh: mutmut run failed; see mutants/run.log" >&2
    tail -n 20 mutants/run.log >&2
    exit 1
fi
.venv/bin/mutmut results --all true >mutants/results.txt
.venv/bin/python scripts/mutation_score.py mutants/results.txt "$@"
