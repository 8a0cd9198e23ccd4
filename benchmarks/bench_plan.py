"""How ``plan()``'s time grows with the world size: with the number of layouts, not with W.

For W = 2^12, 2^16, ..., 2^40 on 8-GPU nodes it times ``plan(W, Cluster(8), model)`` for a dense
model (Llama-70B) and an MoE model (Mixtral 8x7B) and prints, per W:

- ``layouts``: the candidates plan enumerated (costed + rejected as invalid), i.e. the
  factorisations tp * cp * pp * dp = W (times ep, orders and vpp) it had to consider;
- ``plan``: the median seconds of ``--repeat`` runs, and the microseconds per layout, which stay
  flat when the cost follows the layouts and not W;
- ``baseline``: the same ``plan`` with its divisors found by the straightforward scan of 1..W
  (what plan did before), measured in the same run up to 2^``--baseline-max-exp``;
- ``scan``: one bare ``[d for d in range(1, W + 1) if W % d == 0]``, the floor of any O(W)
  enumeration, up to the same bound.

Prints a table and writes JSON. Run: ``python benchmarks/bench_plan.py`` (``--quick``: fewer
world sizes and repeats).
"""

from __future__ import annotations

import argparse
import platform
import sys
from typing import Any
from unittest import mock

from _timing import median_seconds, write_result

from topology import Cluster
from topology.cost import MODELS, plan

MODEL_NAMES = ("llama-70b", "mixtral-8x7b")


def scanned_divisors(n: int) -> list[int]:
    """The straightforward O(n) divisor enumeration plan used before."""
    return [d for d in range(1, n + 1) if n % d == 0]


def baseline_plan(world: int, model: str) -> object:
    """``plan`` with its divisors found by scanning 1..W."""
    with mock.patch("topology.cost._plan.divisors", scanned_divisors):
        return plan(world, Cluster(8), MODELS[model])


def measure(world: int, model: str, repeat: int, baseline_max: int) -> dict[str, Any]:
    """One row: layouts, plan's median, and the baselines where W is small enough."""
    result = plan(world, Cluster(8), MODELS[model])
    layouts = result.considered + dict(result.rejected).get("invalid", 0)
    seconds = median_seconds(lambda: plan(world, Cluster(8), MODELS[model]), repeat)
    row: dict[str, Any] = {
        "model": model,
        "world_size": world,
        "layouts": layouts,
        "ranked": len(result.ranked),
        "plan_s": seconds,
        "plan_us_per_layout": seconds / layouts * 1e6,
        "baseline_s": None,
        "scan_s": None,
    }
    if world <= baseline_max:
        row["baseline_s"] = median_seconds(lambda: baseline_plan(world, model), repeat)
        row["scan_s"] = median_seconds(lambda: scanned_divisors(world), repeat)
    return row


def _cell(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.4f}"


def print_table(rows: list[dict[str, Any]]) -> None:
    """The rows as a fixed-width table."""
    header = (
        f"{'model':<13} {'W':>6} {'layouts':>8} {'plan s':>9} {'us/layout':>10} "
        f"{'baseline s':>11} {'scan s':>9}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        exponent = row["world_size"].bit_length() - 1
        print(
            f"{row['model']:<13} {'2^' + str(exponent):>6} {row['layouts']:>8} "
            f"{row['plan_s']:>9.4f} {row['plan_us_per_layout']:>10.1f} "
            f"{_cell(row['baseline_s']):>11} {_cell(row['scan_s']):>9}"
        )


def main() -> None:
    """Parse arguments, measure, print and write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="W = 2^12, 2^24, 2^40; 3 repeats")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure (median)")
    parser.add_argument(
        "--baseline-max-exp",
        type=int,
        default=20,
        help="measure the O(W) baselines up to W = 2^this (default 20)",
    )
    parser.add_argument("--out", default="benchmarks/results/bench_plan.json")
    args = parser.parse_args()
    exponents = (12, 24, 40) if args.quick else tuple(range(12, 41, 4))
    repeat = 3 if args.quick else args.repeat
    rows = [
        measure(2**e, model, repeat, 2**args.baseline_max_exp)
        for model in MODEL_NAMES
        for e in exponents
    ]
    print_table(rows)
    result = {
        "benchmark": "bench_plan",
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "repeat": repeat,
        "rows": rows,
    }
    write_result(args.out, result)


if __name__ == "__main__":
    main()
