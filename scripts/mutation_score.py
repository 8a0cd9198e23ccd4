"""The core's mutation score from mutmut's verdicts, exact where every mutant ran, else estimated.

A full mutmut run of the core takes hours on 2 cores: a surviving mutant costs every test that
calls its function. So ``scripts/mutation.sh`` can run a seeded, stratified random sample of the
mutants that have not run yet (``--pick``), and this script reports per module:

- the exact part: mutants with a verdict that were not drawn into the sample;
- the sampled part: the rest of the module, estimated from the sample's kill rate
  (with a 95% interval: normal approximation with finite-population correction).

A mutant counts as killed when mutmut says ``killed`` or ``timeout`` (as mutmut's own score does);
``survived``, ``suspicious`` and ``no tests`` count against the score (a function no core test
calls is untested, not excused); ``skipped`` and ``not checked`` mutants outside the sample are
left out and listed.

    python scripts/mutation_score.py RESULTS [GLOB ...]                  # the table
    python scripts/mutation_score.py RESULTS --pick 0.1 --seed 9 [GLOB ...]  # names to sample

RESULTS is the output of ``mutmut results --all true``; the sample is kept in
``mutants/sample.txt`` so the report knows which verdicts came from it, and survivors that tests
written after the run kill (``scripts/mutation_recheck.py``, ``mutants/recheck.txt``) count as
killed.
"""

from __future__ import annotations

import argparse
import fnmatch
import math
import random
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

SAMPLE = Path("mutants/sample.txt")
RECHECK = Path("mutants/recheck.txt")  # survivors that later tests kill (mutation_recheck.py)
KILLED = {"killed", "timeout"}
AGAINST = {"survived", "suspicious", "no tests"}
MODULE = re.compile(r"^(.*?)\.x[_ǁ]")


def read_verdicts(path: Path, patterns: list[str]) -> dict[str, str]:
    """``{mutant name: status}`` for the mutants whose names match one of ``patterns``."""
    verdicts: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        name, _, status = line.strip().rpartition(": ")
        if name and any(fnmatch.fnmatch(name, p) for p in patterns):
            verdicts[name] = status
    return verdicts


def module_of(name: str) -> str:
    """``topology._layout.grid`` for ``topology._layout.grid.xǁGridǁsize__mutmut_3``."""
    found = MODULE.match(name)
    return found.group(1) if found else name.rpartition(".")[0]


def pick(verdicts: dict[str, str], fraction: float, seed: int) -> list[str]:
    """A seeded sample of ``fraction`` of each module's unchecked mutants (at least 3 each)."""
    unchecked: dict[str, list[str]] = defaultdict(list)
    for name, status in sorted(verdicts.items()):
        if status == "not checked":
            unchecked[module_of(name)].append(name)
    chosen: list[str] = []
    rng = random.Random(seed)
    for module in sorted(unchecked):
        names = unchecked[module]
        count = min(len(names), max(3, math.ceil(fraction * len(names))))
        chosen += sorted(rng.sample(names, count))
    return chosen


def report(verdicts: dict[str, str], sample: set[str]) -> None:
    """Print one row per module and the whole: mutants counted, killed, score, how measured."""
    rows = []
    total_all = 0
    killed_all = 0.0
    variance = 0.0
    left_out: Counter[str] = Counter()
    for module in sorted({module_of(n) for n in verdicts}):
        names = [n for n in verdicts if module_of(n) == module]
        drawn = [n for n in names if n in sample]
        exact, rest = [], len(drawn)
        for name in names:
            status = verdicts[name]
            if name in sample:
                continue
            if status in KILLED | AGAINST:
                exact.append(name)
            elif status == "not checked" and drawn:
                rest += 1  # the sample stands for it
            else:
                left_out[status] += 1
        ran = [n for n in drawn if verdicts[n] in KILLED | AGAINST]
        left_out["not checked (sampled, not yet run)"] += len(drawn) - len(ran)
        killed = float(sum(verdicts[n] in KILLED for n in exact))
        total = len(exact)
        if ran:
            rate = sum(verdicts[n] in KILLED for n in ran) / len(ran)
            killed += rate * rest
            total += rest
            if rest > 1:
                correction = max(0.0, (rest - len(ran)) / (rest - 1))
                variance += rest**2 * rate * (1 - rate) / len(ran) * correction
        total_all += total
        killed_all += killed
        unchecked = sum(verdicts[n] == "not checked" for n in names if n not in sample)
        if drawn:
            how = f"{len(ran)} of {rest} sampled"
        else:
            how = f"partial: {unchecked} not checked" if unchecked else "exact"
        rows.append((module, total, killed, 100 * killed / total if total else 0.0, how))
    width = max([len(r[0]) for r in rows] + [6])
    print(f"{'module':{width}}  {'mutants':>7}  {'killed':>8}  {'score':>6}  measured")
    for module, total, killed, score, how in rows:
        print(f"{module:{width}}  {total:7d}  {killed:8.1f}  {score:5.1f}%  {how}")
    score = 100 * killed_all / total_all if total_all else 0.0
    half = 196 * math.sqrt(variance) / total_all if total_all else 0.0
    interval = f"  (95% interval +-{half:.1f} points)" if variance else ""
    print(f"{'all':{width}}  {total_all:7d}  {killed_all:8.1f}  {score:5.1f}%{interval}")
    shown = ", ".join(f"{status} {count}" for status, count in sorted(left_out.items()) if count)
    if shown:
        print(f"left out: {shown}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="output of `mutmut results --all true`")
    parser.add_argument("globs", nargs="*", default=["*"], help="mutant names to count")
    parser.add_argument("--pick", type=float, help="print a sample of this fraction instead")
    parser.add_argument("--seed", type=int, default=0, help="the sample's random seed")
    args = parser.parse_args()
    verdicts = read_verdicts(args.results, args.globs)
    if args.pick is not None:
        chosen = pick(verdicts, args.pick, args.seed)
        SAMPLE.write_text("".join(f"{n}\n" for n in chosen), encoding="utf-8")
        print("\n".join(chosen))
        return 0
    sample = set(SAMPLE.read_text(encoding="utf-8").split()) if SAMPLE.exists() else set()
    if RECHECK.exists():
        for line in RECHECK.read_text(encoding="utf-8").splitlines():
            name, _, status = line.rpartition(": ")
            if verdicts.get(name) in AGAINST and status == "killed":
                verdicts[name] = "killed"
    report(verdicts, sample)
    return 0


if __name__ == "__main__":
    sys.exit(main())
