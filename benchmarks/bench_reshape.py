"""What a re-layout after one lost node keeps: ``topology.reshape`` against shift-left.

At W = 16,384 (tp 8, pp 8, dp 256, 8 GPUs a node), node 3 lost:

- ``shift-left``: nvidia-resiliency-ext's rank assignment, re-implemented here: the healthy ranks
  keep their order and close the gap (new rank = position among the survivors), on the largest
  multiple of one model replica (tp * pp ranks), blind to the layout;
- ``reshape``: ``topology.reshape`` with no spare (``auto``: drops the lost node's replica);
- ``reshape + spare``: one spare host in the lost host's rack (``policy="spares"``).

Per row, over every kind: communicators reused (an old group, mapped), shrunk (an old group
minus the ranks that leave) and rebuilt (anything else), counted here independently of
``reshape``'s own counts (sets of mapped groups), the active survivors that keep their shard
coordinates (every axis but dp / edp) and those that change pipeline stage. Then the median
time of ``reshape`` at W = 131,072 (same layout; wall and this process's CPU time, which a
shared machine disturbs less), and at 16,384 as the in-run baseline; then the CPU time of each
policy forced (``drop``, ``spares`` with one spare host, ``shrink``) at 131,072.
Prints a table and writes ``benchmarks/results/bench_reshape.json``.

Run: ``python benchmarks/bench_reshape.py`` (``--quick``: 1 timing run, W = 32,768 for the big one).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from _timing import median_seconds, write_result

from topology import Allocation, Host, Tier, Topology, reshape

GPUS = 8
LOST_HOST = 3


def shift_left(topo: Topology, lost: set[int]) -> tuple[Topology, list[int | None]]:
    """Healthy ranks shifted left onto the largest whole number of replicas (layout-blind)."""
    alive = [r for r in range(topo.world_size) if r not in lost]
    replica = topo.tp * topo.pp * topo.cp
    world = len(alive) // replica * replica
    new = Topology.from_dict({**topo.to_dict(), "world_size": world, "dp": None})
    rank_of: list[int | None] = [None] * topo.world_size
    for position, rank in enumerate(alive[:world]):
        rank_of[rank] = position
    return new, rank_of


def count(old: Topology, new: Topology, rank_of: Sequence[int | None]) -> dict[str, Any]:
    """Communicators reused / shrunk / rebuilt over every kind, shards kept, stages moved."""
    totals = {"reuse": 0, "shrink": 0, "rebuild": 0}
    kinds: dict[str, dict[str, int]] = {}
    for kind in new.kinds:
        kinds[kind] = {"reuse": 0, "shrink": 0, "rebuild": 0}
        whole, part = set(), set()
        for group in old.groups(kind):
            mapped = [rank_of[r] for r in group]
            kept = tuple(m for m in mapped if m is not None)
            (whole if len(kept) == len(mapped) else part).add(kept)
        for group in new.groups(kind):
            key = tuple(group)
            bucket = "reuse" if key in whole else "shrink" if key in part else "rebuild"
            totals[bucket] += 1
            kinds[kind][bucket] += 1
    active = keep = moved_stage = 0
    for rank, target in enumerate(rank_of):
        if target is None:
            continue
        active += 1
        a, b = old.dense.coord(rank), new.dense.coord(target)
        keep += all(a[x] == b[x] for x in a if x != "dp")
        moved_stage += a["pp"] != b["pp"]
    return {
        **totals,
        "active": active,
        "keeps_shard": keep,
        "stage_moved": moved_stage,
        "kinds": kinds,
    }


def rows(world: int) -> list[dict[str, Any]]:
    topo = Topology(world, tp=8, pp=8)
    lost = set(range(LOST_HOST * GPUS, (LOST_HOST + 1) * GPUS))
    new, rank_of = shift_left(topo, lost)
    out = [{"method": "shift-left", **count(topo, new, rank_of)}]
    ours = reshape(topo, lost_hosts=[LOST_HOST], gpus_per_node=GPUS)
    # 18 hosts a rack (NVL72-like racks of 72 GPUs hold 9; any size works), plus two spare
    # hosts: the first in another rack, the second in the lost host's rack
    hosts = world // GPUS
    racks = [f"rack{h // 18}" for h in range(hosts)] + ["rack-spare", f"rack{LOST_HOST // 18}"]
    allocation = Allocation(
        [Host(f"n{h}", GPUS, (rack,)) for h, rack in enumerate(racks)], (Tier("rack"),)
    )
    spared = reshape(
        topo, lost_hosts=[LOST_HOST], gpus_per_node=GPUS, allocation=allocation, policy="spares"
    )
    for name, r in (("reshape", ours), ("reshape + spare", spared)):
        counted = count(topo, r.new, r.mapping)
        assert (counted["reuse"], counted["shrink"]) == (r.counts()["reuse"], r.counts()["trim"])
        out.append({"method": name, "policy": r.policy, **counted, "spare": list(r.replaced)})
    return out


def _median_cpu(fn: Callable[[], object], repeat: int) -> float:
    """The median CPU time of ``repeat`` calls (this process; robust to a shared machine)."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 timing run, smaller big W")
    parser.add_argument("--repeat", type=int, default=5, help="timing runs (median)")
    parser.add_argument("--out", default="benchmarks/results/bench_reshape.json")
    args = parser.parse_args()
    repeat = 1 if args.quick else args.repeat
    big = 32768 if args.quick else 131072
    table = rows(16384)
    header = (
        f"{'method':16} {'reuse':>7} {'shrink':>7} {'rebuild':>8} {'keeps shard':>14} "
        f"{'stage moved':>12}"
    )
    print(f"W = 16,384, tp 8, pp 8, node {LOST_HOST} of 8 GPUs lost")
    print(header)
    for row in table:
        share = 100 * row["keeps_shard"] / row["active"]
        print(
            f"{row['method']:16} {row['reuse']:>7} {row['shrink']:>7} {row['rebuild']:>8} "
            f"{share:>13.2f}% {row['stage_moved']:>12}"
        )
    timings, cpu = {}, {}
    for world in (16384, big):
        topo = Topology(world, tp=8, pp=8)
        call = partial(reshape, topo, lost_hosts=[LOST_HOST], gpus_per_node=GPUS)
        timings[world] = median_seconds(call, repeat)
        cpu[world] = _median_cpu(call, repeat)
        print(
            f"reshape at W = {world:,}: {timings[world]:.3f} s wall, {cpu[world]:.3f} s CPU "
            f"(medians of {repeat})"
        )
    ratio = timings[big] / timings[16384]
    print(f"ratio {big:,} / 16,384: {ratio:.1f}x for {big // 16384}x the ranks")
    topo = Topology(big, tp=8, pp=8)
    spare = [big // GPUS]  # one spare host after the layout's
    policies = {}
    for policy in ("drop", "spares", "shrink"):
        call = partial(
            reshape, topo, lost_hosts=[LOST_HOST], gpus_per_node=GPUS, spares=spare, policy=policy
        )
        policies[policy] = _median_cpu(call, repeat)
    print(
        f"per policy at W = {big:,} (CPU, medians of {repeat}): "
        + ", ".join(f"{name} {seconds:.3f} s" for name, seconds in policies.items())
    )
    write_result(
        args.out,
        {
            "rows": table,
            "seconds": {str(k): v for k, v in timings.items()},
            "cpu_seconds": {str(k): v for k, v in cpu.items()},
            "policy_cpu_seconds": policies,
            "repeat": repeat,
            "ratio": ratio,
        },
    )


if __name__ == "__main__":
    main()
