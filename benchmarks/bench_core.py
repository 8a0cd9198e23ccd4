"""How fast the core enumerates Megatron's group lists, against a baseline, Megatron and the floor.

For each world size W = 2^10 ... 2^20 (tp8 pp4, Megatron's default order) it times:

- ``topology``: ``list(topo.groups(kind))`` for all 15 lists ``initialize_model_parallel`` builds
  (dense dp-cp, dp, cp, tp-pp, tp, pp, tp-dp-cp, tp-dp, tp-cp; expert ep, etp, etp-ep, etp-ep-pp,
  edp, pp), every group a tuple of ints;
- ``baseline``: a straightforward pure-Python rewrite of the masked-orthogonal algorithm (below);
- ``megatron``: Megatron-core's ``RankGenerator.get_ranks`` (if installed, W <= 2^megatron-max);
- ``floor``: CPython allocating the same number of tuples of the same sizes from ``range`` objects.

It also times one rank's lookups for every kind (``locate``: group index and local rank, no
group built), the same rank's groups materialised (``group_of``) beside the floor of allocating
tuples of those sizes, building a ``Topology``, and ``import topology`` in a fresh interpreter.
Figures are medians of ``--repeat`` runs; ratios are against the floor measured in the same run.
Prints a table and writes JSON.

Run: ``python benchmarks/bench_core.py`` (``--quick`` for W up to 2^14).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import warnings
from functools import partial
from typing import Any

from _timing import median_seconds, write_result

from topology import Topology

DENSE = ("dp-cp", "dp", "cp", "tp-pp", "tp", "pp", "tp-dp-cp", "tp-dp", "tp-cp")
EXPERT = ("ep", "etp", "etp-ep", "etp-ep-pp", "edp", "pp")
MEGATRON_TOKENS = {
    "dp-cp": "dp-cp",
    "etp": "tp",
    "etp-ep": "tp-ep",
    "etp-ep-pp": "tp-ep-pp",
    "edp": "dp",
}
ORDER = "tp-cp-ep-dp-pp"


def baseline_groups(world: int, sizes: list[int], mask: list[bool]) -> list[tuple[int, ...]]:
    """Straightforward masked-orthogonal groups: decompose every index, rank by rank."""
    strides = [1]
    for size in sizes[:-1]:
        strides.append(strides[-1] * size)
    inner = [(s, d) for s, d, m in zip(sizes, strides, mask, strict=True) if m]
    outer = [(s, d) for s, d, m in zip(sizes, strides, mask, strict=True) if not m]
    group_size = 1
    for size, _ in inner:
        group_size *= size
    groups = []
    for group_index in range(world // group_size):
        base = 0
        rest = group_index
        for size, stride in outer:
            base += (rest % size) * stride
            rest //= size
        ranks = []
        for position in range(group_size):
            offset = 0
            rest = position
            for size, stride in inner:
                offset += (rest % size) * stride
                rest //= size
            ranks.append(base + offset)
        groups.append(tuple(ranks))
    return groups


def all_lists_topology(topo: Topology) -> int:
    """Materialise all 15 lists; returns the number of groups (to keep the work observable)."""
    return sum(len(list(topo.groups(kind))) for kind in (*DENSE, *EXPERT))


def all_lists_baseline(world: int, tp: int, pp: int) -> int:
    """The 15 lists with the baseline algorithm."""
    dp = world // (tp * pp)
    dense_sizes = {"tp": tp, "cp": 1, "ep": 1, "dp": dp, "pp": pp}
    expert_sizes = {"tp": tp, "cp": 1, "ep": 1, "dp": dp, "pp": pp}
    tokens = ORDER.split("-")
    count = 0
    for sizes, kinds in ((dense_sizes, DENSE), (expert_sizes, EXPERT)):
        ordered = [sizes[t] for t in tokens]
        for kind in kinds:
            chosen = MEGATRON_TOKENS.get(kind, kind).split("-")
            count += len(baseline_groups(world, ordered, [t in chosen for t in tokens]))
    return count


def all_lists_floor(topo: Topology) -> int:
    """Allocate as many tuples, of the same sizes, straight from ``range`` objects."""
    world = topo.world_size
    count = 0
    for kind in (*DENSE, *EXPERT):
        size = topo.size(kind)
        groups = [tuple(range(start, start + size)) for start in range(0, world, size)]
        count += len(groups)
    return count


def all_lists_megatron(world: int, tp: int, pp: int) -> int | None:
    """The 15 lists with Megatron-core's RankGenerator, or None if it is not installed."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from megatron.core.parallel_state import RankGenerator
    except Exception:
        return None
    dp = world // (tp * pp)
    dense = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=1, order=ORDER)
    expert = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=1, order=ORDER)
    count = 0
    for generator, kinds in ((dense, DENSE), (expert, EXPERT)):
        for kind in kinds:
            count += len(generator.get_ranks(MEGATRON_TOKENS.get(kind, kind)))
    return count


def one_rank_lookups(topo: Topology, rank: int) -> int:
    """One rank's group index and local rank for every kind (what ``locate`` answers)."""
    kinds = [kind for kind in topo.kinds if topo.has_group(rank, kind)]
    return sum(sum(topo.locate(rank, kind)) + topo.size(kind) for kind in kinds)


def one_rank_groups(topo: Topology, rank: int) -> int:
    """One rank's group of every kind, each materialised as a tuple."""
    kinds = [kind for kind in topo.kinds if topo.has_group(rank, kind)]
    return sum(len(topo.group_of(rank, kind)) for kind in kinds)


def one_rank_floor(topo: Topology, rank: int) -> int:
    """Allocating tuples of the same sizes from ranges (the floor for ``one_rank_groups``)."""
    kinds = [kind for kind in topo.kinds if topo.has_group(rank, kind)]
    return sum(len(tuple(range(topo.size(kind)))) for kind in kinds)


def import_seconds(repeat: int) -> float:
    """Median wall time of ``import topology`` in a fresh interpreter (import only)."""
    code = "import time; s = time.perf_counter(); import topology; print(time.perf_counter() - s)"
    times = [
        float(
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(repeat)
    ]
    return statistics.median(times)


def run(max_exponent: int, repeat: int, megatron_max: int, tp: int, pp: int) -> dict[str, Any]:
    rows = []
    for exponent in range(10, max_exponent + 1, 2):
        world = 2**exponent
        topo = Topology(world, tp=tp, pp=pp)
        reps = repeat if exponent <= 16 else max(3, repeat // 2)
        floor = median_seconds(partial(all_lists_floor, topo), reps)
        ours = median_seconds(partial(all_lists_topology, topo), reps)
        base_reps = reps if exponent <= 16 else 1
        baseline = median_seconds(partial(all_lists_baseline, world, tp, pp), base_reps)
        megatron = None
        if exponent <= megatron_max and all_lists_megatron(8 * tp * pp, tp, pp) is not None:
            megatron_reps = 1 if exponent > 14 else 3
            megatron = median_seconds(partial(all_lists_megatron, world, tp, pp), megatron_reps)
        rank = world - 3
        lookups = median_seconds(partial(one_rank_lookups, topo, rank), 21)
        groups = median_seconds(partial(one_rank_groups, topo, rank), 21)
        groups_floor = median_seconds(partial(one_rank_floor, topo, rank), 21)
        build = median_seconds(partial(Topology, world, tp=tp, pp=pp), 201)
        assert (
            all_lists_topology(topo) == all_lists_floor(topo) == all_lists_baseline(world, tp, pp)
        )
        rows.append(
            {
                "world_size": world,
                "floor_s": floor,
                "topology_s": ours,
                "topology_over_floor": ours / floor,
                "baseline_s": baseline,
                "baseline_over_floor": baseline / floor,
                "megatron_s": megatron,
                "megatron_over_floor": None if megatron is None else megatron / floor,
                "one_rank_locate_all_kinds_ms": lookups * 1e3,
                "one_rank_groups_all_kinds_ms": groups * 1e3,
                "one_rank_groups_floor_ms": groups_floor * 1e3,
                "build_topology_us": build * 1e6,
            }
        )
        print_row(rows[-1])
    return {
        "layout": f"tp{tp} pp{pp} order {ORDER}",
        "repeat": repeat,
        "python": sys.version.split()[0],
        "import_topology_ms": import_seconds(5) * 1e3,
        "rows": rows,
    }


HEADER = (
    f"{'W':>8} {'floor s':>9} {'topology s':>11} {'x floor':>8} {'baseline s':>11} "
    f"{'x floor':>8} {'megatron s':>11} {'x floor':>8} {'locate ms':>10} {'groups ms':>10} "
    f"{'floor ms':>9} {'build us':>9}"
)


def print_row(row: dict[str, Any]) -> None:
    if row["world_size"] == 2**10:
        print(HEADER)
    mega = row["megatron_s"]
    mega_text = f"{mega:11.3f} {row['megatron_over_floor']:8.1f}" if mega else f"{'-':>11} {'-':>8}"
    print(
        f"{row['world_size']:>8} {row['floor_s']:9.4f} {row['topology_s']:11.4f} "
        f"{row['topology_over_floor']:8.2f} {row['baseline_s']:11.3f} "
        f"{row['baseline_over_floor']:8.1f} {mega_text} "
        f"{row['one_rank_locate_all_kinds_ms']:10.3f} {row['one_rank_groups_all_kinds_ms']:10.3f} "
        f"{row['one_rank_groups_floor_ms']:9.3f} {row['build_topology_us']:9.1f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="W up to 2^14, fewer repeats")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure (median)")
    parser.add_argument(
        "--megatron-max",
        type=int,
        default=16,
        help="largest exponent to time Megatron at (it takes ~47 s at 20)",
    )
    parser.add_argument("--out", default="benchmarks/results/bench_core.json")
    args = parser.parse_args()
    max_exponent = 14 if args.quick else 20
    repeat = 3 if args.quick else args.repeat
    result = run(max_exponent, repeat, args.megatron_max, tp=8, pp=4)
    print(
        f"import topology: {result['import_topology_ms']:.1f} ms (median of 5, fresh interpreter)"
    )
    write_result(args.out, result)


if __name__ == "__main__":
    main()
