"""``place`` against the launchers' orders, its optimality, and the time of place and check.

Allocations (all built here, deterministic):

- ``nvl72-ragged``: 4 NVL72 racks with 18, 18, 16 and 12 usable 4-GPU trays, host names
  ``node1..node64`` without zero padding (torchrun's lexicographic order scatters them).
- ``slurm-block``: a Slurm ``topology.conf`` with the block plugin, 8 blocks of 18 four-GPU
  nodes, read with ``read_slurm_topology``; the job got 64 nodes, blocks 3 and 6 missing and
  the others ragged.
- ``fat-tree``: two levels, 64 leaves of 16 eight-GPU hosts under 8 spines; the job got 64 hosts
  scattered over the leaves (a fixed random draw), host names in no relation to leaves.

For each, an MoE layout (tp, ep, pp) and a dense one (tp, pp, dp): the crossing vector
(:meth:`Crossings.key`: tp/etp, then ep/cp, then pp/dp/edp groups crossing each tier, innermost
tier first) of the listed order, torchrun's lexicographic order, natural order and ``place``;
"beats" says whether place is strictly better than each order that is not itself optimal.
"bound" is :attr:`Arrangement.bound`, a lower bound on each entry of the key (over the orders
that cross no group of an earlier class where place crosses none); "proven" marks the entries
that meet it (``+``) or not (``-``), "optimal" whether all do (then no host order has a smaller
key). These 64-host jobs are past the exact search (8 hosts, or few host types and slots), so
these are the bound's certificates.
Issue 22 reported place at MoE ep/cp 10 and dense pp/dp/edp 168 outer-tier crossings on the
fat tree, and an exact solver at 6 and 128.

Timings (median of 5): ``place`` and ``check`` on an explicit map of 16,384 ranks (4,096 ragged
trays in racks, with a leaf tier above them). The exact search's cost: ``place`` on 200 seeded
8-host allocations with two tiers that do not nest (where it runs the search), median and
largest seconds, and how many of its orders the search found (``Arrangement.method``: the
heuristics' best had a larger key).

Run: ``python benchmarks/bench_place.py`` (targets: place < 2 s, check < 1 s at 16,384 ranks).
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import median_seconds, write_result

from topology import (
    Allocation,
    Host,
    Tier,
    Topology,
    check,
    crossings,
    place,
    read_slurm_topology,
)

BASELINES = ("listed", "lexicographic", "natural")


def nvl72_ragged() -> Allocation:
    hosts = []
    for rack, trays in enumerate((18, 18, 16, 12)):
        for _ in range(trays):
            hosts.append(Host(f"node{len(hosts) + 1}", 4, (f"rack{rack}",)))
    return Allocation(hosts, (Tier("nvl72", nvlink=True),))


def slurm_block() -> Allocation:
    lines = [f"BlockName=b{b} Nodes=gpu[{b * 18 + 1:03d}-{b * 18 + 18:03d}]" for b in range(8)]
    text = "\n".join([*lines, "BlockSizes=18"]) + "\n"
    rng = random.Random(7)
    chosen = []
    for block in range(8):
        if block in (3, 6):
            continue
        members = [f"gpu{block * 18 + i:03d}" for i in range(1, 19)]
        chosen += rng.sample(members, rng.choice([11, 12, 13, 14]))
    hosts = sorted(chosen)[:64]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "topology.conf")
        path.write_text(text)
        return read_slurm_topology(str(path), gpus_per_host=4, hosts=hosts)


def fat_tree() -> Allocation:
    rng = random.Random(11)
    slots = [(leaf, i) for leaf in range(64) for i in range(16)]
    picked = rng.sample(slots, 64)
    names = [f"dgx{n}" for n in rng.sample(range(1, 1025), 64)]
    hosts = [
        Host(name, 8, (f"leaf{leaf}", f"spine{leaf // 8}"))
        for name, (leaf, _) in zip(names, picked, strict=True)
    ]
    return Allocation(hosts, (Tier("leaf"), Tier("spine")))


CASES = {
    "nvl72-ragged": (
        nvl72_ragged,
        {
            "moe tp4 ep8 pp4": Topology(256, tp=4, ep=8, pp=4),
            "dense tp4 pp4": Topology(256, tp=4, pp=4),
        },
    ),
    "slurm-block": (
        slurm_block,
        {
            "moe tp4 ep8 pp4": Topology(256, tp=4, ep=8, pp=4),
            "dense tp8 pp4": Topology(256, tp=8, pp=4),
        },
    ),
    "fat-tree": (
        fat_tree,
        {
            "moe tp2 ep16 pp4": Topology(512, tp=2, ep=16, pp=4),
            "dense tp8 pp8": Topology(512, tp=8, pp=8),
        },
    ),
}


def compare() -> list[dict[str, object]]:
    rows = []
    for name, (build, layouts) in CASES.items():
        alloc = build()
        for label, topo in layouts.items():
            found = place(topo, alloc, order="listed")
            seconds = median_seconds(lambda t=topo, a=alloc: place(t, a, order="listed"), 3)
            keys = {
                order: crossings(topo, alloc.rank_map(topo.world_size, order=order)).key()
                for order in BASELINES
            }
            best = found.after.key()
            beats = {
                order: ("optimal too" if key == best else ("yes" if best < key else "NO"))
                for order, key in keys.items()
            }
            rows.append(
                {
                    "allocation": name,
                    "layout": label,
                    "tiers": list(found.after.tiers[1:]),
                    **{order: list(key) for order, key in keys.items()},
                    "place": list(best),
                    "bound": list(found.bound or ()),
                    "proven": list(found.proven),
                    "exact": found.exact,
                    "optimal": found.optimal,
                    "method": found.method,
                    "beats": beats,
                    "place_s": seconds,
                }
            )
    return rows


def ragged_16k() -> Allocation:
    hosts = []
    rack = 0
    while len(hosts) < 4096:
        for _ in range((18, 18, 16, 12)[rack % 4]):
            if len(hosts) < 4096:
                hosts.append(Host(f"node{len(hosts) + 1}", 4, (f"rack{rack}", f"leaf{rack // 8}")))
        rack += 1
    return Allocation(hosts, (Tier("rack", nvlink=True), Tier("leaf")))


def timings(repeat: int) -> list[dict[str, object]]:
    alloc = ragged_16k()
    rows = []
    for label, topo in {
        "moe tp4 ep8 pp8": Topology(16_384, tp=4, ep=8, pp=8),
        "dense tp8 pp8": Topology(16_384, tp=8, pp=8),
    }.items():
        rank_map = alloc.rank_map(16_384, order="lexicographic")
        rows.append(
            {
                "layout": label,
                "ranks": 16_384,
                "place_s": median_seconds(
                    lambda topo=topo: place(topo, alloc, order="lexicographic"), repeat
                ),
                "check_s": median_seconds(
                    lambda topo=topo, rank_map=rank_map: check(topo, rank_map), repeat
                ),
            }
        )
    return rows


def small_allocations(count: int) -> list[tuple[Topology, Allocation]]:
    """``count`` seeded 8-host allocations where the exact search works hardest: two tiers drawn
    apart (an NVLink domain of 4 or unknown, a rack of 3), 1 to 4 GPUs per host, a layout of
    6 to 8 hosts' ranks with tp, cp and pp drawn from the divisors left."""
    rng = random.Random(22)
    cases = []
    while len(cases) < count:
        gpus = rng.choice([1, 2, 3, 4])
        nvlink = rng.choices(["d0", "d1", "d2", "d3", None], k=8)
        racks = rng.choices(["r0", "r1", "r2"], k=8)
        hosts = [Host(f"h{i}", gpus, (nvlink[i], racks[i])) for i in range(8)]
        world = rng.randint(5 * gpus + 1, 8 * gpus)
        divisors = [d for d in range(1, world + 1) if world % d == 0]
        tp = rng.choice(divisors)
        cp = rng.choice([d for d in divisors if (world // tp) % d == 0])
        pp = rng.choice([d for d in divisors if (world // tp // cp) % d == 0])
        order = rng.choice(["tp-cp-ep-dp-pp", "tp-cp-pp-dp"])
        topo = Topology(world, tp=tp, cp=cp, pp=pp, order=order)
        cases.append((topo, Allocation(hosts, (Tier("nvl", nvlink=True), Tier("rack")))))
    return cases


def exact_cost(count: int) -> dict[str, object]:
    """place on ``count`` 8-host allocations: median and largest seconds, how many it searched
    exactly, and how many orders the search found below the heuristics' best key."""
    cases = small_allocations(count)
    seconds = [median_seconds(lambda t=t, a=a: place(t, a), 3) for t, a in cases]
    found = [place(t, a) for t, a in cases]
    return {
        "allocations": count,
        "hosts": 8,
        "exact_median_s": statistics.median(seconds),
        "exact_max_s": max(seconds),
        "searched": sum(arrangement.exact for arrangement in found),
        "improved_by_search": sum(arrangement.method == "exact search" for arrangement in found),
    }


def main() -> None:
    rows = compare()
    print(f"{'allocation':<14} {'layout':<18} {'order':<14} crossing vector (per class, per tier)")
    for row in rows:
        for order in (*BASELINES, "place", "bound"):
            print(f"{row['allocation']:<14} {row['layout']:<18} {order:<14} {row[order]}")
        proven = "".join("+" if p else "-" for p in cast("list[bool]", row["proven"]))
        print(
            f"{'':<33} proven: {proven}; optimal: {row['optimal']}; exact: {row['exact']}; "
            f"place {row['place_s']:.2f} s; method: {row['method']}"
        )
        print(f"{'':<33} beats: {row['beats']}")
    times = timings(5)
    print(f"\n{'layout':<18} {'ranks':>6} {'place s':>8} {'check s':>8}")
    for row in times:
        print(
            f"{row['layout']:<18} {row['ranks']:>6} {row['place_s']:>8.3f} {row['check_s']:>8.3f}"
        )
    cost = exact_cost(200)
    print(
        f"\nexact search, {cost['allocations']} allocations of 8 hosts (two tiers that do not "
        f"nest): place median {cost['exact_median_s']:.4f} s, max {cost['exact_max_s']:.3f} s; "
        f"searched exactly: {cost['searched']}; keys the search made smaller: "
        f"{cost['improved_by_search']}"
    )
    write_result(
        "benchmarks/results/bench_place.json",
        {"comparison": rows, "timings": times, "exact_search": cost},
    )


if __name__ == "__main__":
    main()
