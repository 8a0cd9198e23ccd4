"""Multi-module layouts: how many creation calls the deduplicated schedule needs, and its time.

MIMO shapes (a vision encoder on the first half of the world at the language model's tp, a
language model on the second half at tp and pp): for each world size, the rows compare

- ``calls``: creation calls of ``Modules.schedule()`` (each makes disjoint groups at once, so a
  rank takes part in every call: the calls per rank);
- ``per_kind``: one call per (module, kind) with groups of two or more ranks, no merging across
  modules and no sharing of equal rank sets (the baseline: each module's layout made on its own);
- ``groups``: distinct communicators (what ``new_group`` once per group, as HyperCommGrid's
  ``new_subgroups_by_enumeration`` does, would call on every rank, before its size-1 groups);
- the median time (5 runs) of ``schedule()`` and of ``check_modules`` on 8-GPU nodes.

Run: ``python benchmarks/bench_modules.py`` (writes benchmarks/results/bench_modules.json).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import median_seconds, write_result

from topology import Cluster, Module, Modules, Topology, check_modules

SHAPES = ((64, 2, 2), (16_384, 8, 8), (131_072, 8, 16))
"""(world size, tp, pp of the language model)."""


def mimo(world: int, tp: int, pp: int) -> Modules:
    half = world // 2
    return Modules(
        [
            Module("vision", Topology(half, tp=tp)),
            Module("language", Topology(half, tp=tp, pp=pp), rank_offset=half),
        ]
    )


def per_kind(mods: Modules) -> int:
    return sum(1 for m in mods.modules for kind in m.kinds if m.layout.size(kind) >= 2)


def main() -> None:
    rows = []
    for world, tp, pp in SHAPES:
        mods = mimo(world, tp, pp)
        calls = mods.schedule()
        row = {
            "world_size": world,
            "tp": tp,
            "pp": pp,
            "calls": len(calls),
            "per_kind": per_kind(mods),
            "groups": sum(len(c.groups) for c in calls),
            "schedule_s": median_seconds(mods.schedule, 5),
            "check_modules_s": median_seconds(
                lambda m=mods: check_modules(m, Cluster(gpus_per_node=8)), 3
            ),
        }
        row["ratio_per_kind_to_calls"] = row["per_kind"] / row["calls"]
        rows.append(row)
    head = f"{'world':>8} {'tp':>3} {'pp':>3} {'calls':>6} {'per-kind':>9} {'ratio':>6} "
    print(head + f"{'groups':>8} {'schedule s':>11} {'check s':>8}")
    for r in rows:
        print(
            f"{r['world_size']:>8} {r['tp']:>3} {r['pp']:>3} {r['calls']:>6} {r['per_kind']:>9} "
            f"{r['ratio_per_kind_to_calls']:>6.2f} {r['groups']:>8} {r['schedule_s']:>11.3f} "
            f"{r['check_modules_s']:>8.3f}"
        )
    write_result("benchmarks/results/bench_modules.json", {"mimo": rows})


if __name__ == "__main__":
    main()
