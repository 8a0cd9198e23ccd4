"""How long the rank -> location map of a real allocation takes to build, per launcher order.

The allocation: ragged NVL72 racks (18, 18, 16, 12 usable 4-GPU trays, repeated) with host
names without zero padding, two tiers (rack, leaf). For 16,384 ranks (4,096 hosts) it times
``Allocation.rank_map`` plus the per-rank node and rack labels a check consumes
(``RankMap.nodes``, ``RankMap.domain_ids("rack")``), median of repeated runs.

Run: ``python benchmarks/bench_allocation.py`` (target: well under a second per order).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import median_seconds

from topology import Allocation, Host, Tier

LAUNCHER_ORDERS = ("listed", "lexicographic", "natural", "slurm")
"""The launchers' host orders ``Allocation.rank_map(order=...)`` knows (docs/allocation.md)."""

WORLD = 16_384


def ragged(world: int) -> Allocation:
    """Racks of 18, 18, 16, 12 trays of 4 GPUs, repeated until ``world`` GPUs."""
    hosts = []
    trays = [18, 18, 16, 12]
    rack = 0
    while 4 * len(hosts) < world:
        for _ in range(trays[rack % 4]):
            if 4 * len(hosts) >= world:
                break
            hosts.append(Host(f"node{len(hosts) + 1}", 4, (f"rack{rack}", f"leaf{rack // 8}")))
        rack += 1
    return Allocation(hosts, (Tier("rack", nvlink=True), Tier("leaf")))


def main() -> None:
    alloc = ragged(WORLD)

    def build(order: str) -> None:
        ranks = alloc.rank_map(WORLD, order=order)
        ranks.nodes  # noqa: B018 - the timed work
        ranks.domain_ids("rack")

    print(f"{WORLD} ranks on {len(alloc.hosts)} hosts")
    for order in LAUNCHER_ORDERS:
        seconds = median_seconds(lambda order=order: build(order), repeat=5)  # type: ignore[misc]
        print(f"  {order:<14} {seconds * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
