"""Re-check the mutants that survived a mutmut run against tests written since, in minutes.

mutmut keeps a mutant's verdict until the mutant itself changes, so new tests do not touch the
survivors, and re-running them through mutmut costs every old test again (the ones that already
let them live). This asks only the new tests, with mutmut's own switch: in ``mutants/``, the
environment variable ``MUTANT_UNDER_TEST`` turns one mutant on. As in mutmut's forked runs, it is
set only once the tests are collected, so code that runs at import (a validator factory, a table
built at module level) stays unmutated. A mutant is killed when the new tests fail with it on;
they must pass with no mutant on, or nothing is concluded.

    python scripts/mutation_recheck.py tests/test_new.py [...] [--only NAME ...]

Reads ``mutants/results.txt`` (``mutmut results --all true``), re-checks every ``survived`` and
``no tests`` mutant (or only those named), and adds the killed ones to ``mutants/recheck.txt``
(``name: killed`` lines), which ``scripts/mutation_score.py`` applies on top of mutmut's verdicts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

MUTANTS = Path("mutants")
RECHECK = MUTANTS / "recheck.txt"
TIMEOUT = 300  # seconds per mutant; the new tests take seconds, a looping mutant never ends
PLUGIN = "_mutation_recheck_plugin"
PLUGIN_SOURCE = """import os


def pytest_collection_finish(session):
    os.environ["MUTANT_UNDER_TEST"] = os.environ.get("RECHECK_MUTANT", "")
"""
WORKER = """import os, signal, sys
import pytest

names, out, tests = sys.argv[1], sys.argv[2], sys.argv[3:]
args = ["-x", "-q", "-p", "no:cacheprovider", "-p", "_mutation_recheck_plugin", *tests]


def stop(signum, frame):
    raise TimeoutError


signal.signal(signal.SIGALRM, stop)
with open(names) as wanted, open(out, "w") as verdicts:
    for name in wanted.read().split():
        os.environ["MUTANT_UNDER_TEST"] = ""
        os.environ["RECHECK_MUTANT"] = name
        signal.alarm(int(os.environ["RECHECK_TIMEOUT"]))
        try:
            code = int(pytest.main(args))
        except TimeoutError:
            code = 1  # a mutant that hangs the tests is killed (mutmut counts timeouts so)
        signal.alarm(0)
        verdicts.write(f"{name} {code}\\n")
"""


def run_batch(tests: list[str], names: list[str], worker: int) -> dict[str, int]:
    """``{mutant: pytest exit code}`` from one process that loops over ``names``.

    One process keeps the test modules imported (they are collected with no mutant on, as in
    mutmut's forked runs) and switches the mutant on after each collection.
    """
    wanted = MUTANTS / f"recheck-{worker}.in"
    found = MUTANTS / f"recheck-{worker}.out"
    wanted.write_text("\n".join(names), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(["src", "."]), RECHECK_TIMEOUT=str(TIMEOUT))
    env.update(MUTANT_UNDER_TEST="", CI="true", HYPOTHESIS_PROFILE="mutation")
    command = [sys.executable, "-c", WORKER, wanted.name, found.name, *tests]
    subprocess.run(command, cwd=MUTANTS, env=env, capture_output=True, check=False)
    codes = {}
    for line in found.read_text(encoding="utf-8").splitlines():
        name, _, code = line.rpartition(" ")
        codes[name] = int(code)
    return codes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tests", nargs="+", type=Path, help="test files added since the run")
    parser.add_argument("--jobs", type=int, default=2, help="parallel pytest processes")
    parser.add_argument("--only", nargs="+", default=(), help="re-check only these mutants")
    args = parser.parse_args()
    (MUTANTS / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE, encoding="utf-8")
    copies = []
    for test in args.tests:
        shutil.copy(test, MUTANTS / "tests" / test.name)
        copies.append(f"tests/{test.name}")
    if run_batch(copies, ["none"], 0).get("none") != 0:
        print("mutation_recheck: the new tests fail with no mutant on; fix them first")
        return 1
    lines = (MUTANTS / "results.txt").read_text(encoding="utf-8").splitlines()
    wanted = [
        name
        for name, _, status in (line.strip().rpartition(": ") for line in lines)
        if status in ("survived", "no tests") and (not args.only or name in args.only)
    ]
    chunks = [wanted[k :: args.jobs] for k in range(args.jobs)]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda k: run_batch(copies, chunks[k], k), range(args.jobs)))
    codes = {name: code for batch in results for name, code in batch.items()}
    # exit 1: a test failed (killed); 0: all passed (survived); anything else is inconclusive
    killed = [name for name in wanted if codes.get(name) == 1]
    odd = [
        f"{name} (pytest exit {codes.get(name)})"
        for name in wanted
        if codes.get(name) not in (0, 1)
    ]
    earlier = RECHECK.read_text(encoding="utf-8").splitlines() if RECHECK.exists() else []
    lines = sorted(set(earlier) | {f"{name}: killed" for name in killed})
    RECHECK.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    print(f"mutation_recheck: {len(killed)} of {len(wanted)} survivors killed by the new tests")
    if odd:
        print("inconclusive:", *odd, sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
