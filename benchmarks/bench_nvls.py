"""The NVLS budget of ``check`` and ``plan`` before and after it counts per group shape (issue 30).

``check`` counts, per NVLink domain, the communicators with two or more ranks there. The count
once looked up every rank's group for every family (a ``Counter`` per domain and family: 0.58
CPU-s for ``topology check -w 4096 --tp 8 --pp 8 --gpus-per-node 8``, 1.5 at 16,384 ranks and 2.7
for ``topology plan --world-size 4096 --model llama-70b``, against 0.17, 0.18 and 0.34 in the
release before it); it now counts the groups a domain holds from their shape. Per case this
times, in the same run:

- ``before``: the call with the rank walk put back (the verbatim reference kept in
  ``tests/test_budget_reference.py``);
- ``after``: the call as it is; ``ratio`` is before / after.

The answers are equal (the test checks that); only the time moves. Medians of ``--repeat``
runs. Prints a table and writes JSON. Run: ``python benchmarks/bench_nvls.py`` (``--quick``: 3
repeats).
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for tests/
from _timing import median_seconds, write_result
from tests.test_budget_reference import reference_counts

from topology import Cluster, Topology, check
from topology.cost import MODELS, plan


def cases() -> list[tuple[str, Callable[[], object]]]:
    """``(name, call)`` per row: the issue's three commands, as library calls."""
    return [
        ("check 4,096 ranks, tp 8 pp 8", lambda: check(Topology(4096, tp=8, pp=8), Cluster(8))),
        ("check 16,384 ranks, tp 8 pp 8", lambda: check(Topology(16384, tp=8, pp=8), Cluster(8))),
        ("plan 4,096 ranks, llama-70b", lambda: plan(4096, Cluster(8), MODELS["llama-70b"])),
    ]


def measure(name: str, call: Callable[[], object], repeat: int) -> dict[str, Any]:
    """One row: the median seconds with the reference count and with the current one."""
    with reference_counts():
        before = median_seconds(call, repeat)
    after = median_seconds(call, repeat)
    return {"case": name, "before_s": before, "after_s": after, "ratio": before / after}


def print_table(rows: list[dict[str, Any]]) -> None:
    """The rows as a fixed-width table."""
    header = f"{'case':<32} {'before s':>9} {'after s':>9} {'ratio':>7}"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row['case']:<32} {row['before_s']:>9.4f} {row['after_s']:>9.4f} "
            f"{row['ratio']:>6.1f}x"
        )


def main() -> None:
    """Parse arguments, measure, print and write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure (median)")
    parser.add_argument("--out", default="benchmarks/results/bench_nvls.json")
    args = parser.parse_args()
    repeat = 3 if args.quick else args.repeat
    rows = [measure(name, call, repeat) for name, call in cases()]
    print_table(rows)
    result = {
        "benchmark": "bench_nvls",
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "repeat": repeat,
        "rows": rows,
    }
    write_result(args.out, result)


if __name__ == "__main__":
    main()
