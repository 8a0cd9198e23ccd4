"""A tour of the pure core: the seed-004 layout, one rank explained, a 4096-GPU layout validated.

Run: ``python examples/core_tour.py`` (no torch needed).
"""

from __future__ import annotations

import time

from topology import Topology, TopologyError


def show_seed_004() -> None:
    """Megatron's documented example: 16 GPUs, tp=2, pp=4 (so dp=2)."""
    topo = Topology(16, tp=2, pp=4)
    print(f"== Megatron's 16-GPU example: {topo}")
    for kind in ("tp", "dp", "pp", "tp-pp", "embedding"):
        groups = " ".join(str(list(group)) for group in topo.groups(kind))
        print(f"  {kind:>10}: {groups}")


def explain_rank(topo: Topology, rank: int) -> None:
    """Everything the layout says about one rank."""
    info = topo.rank_info(rank)
    view = info.pipeline
    print(f"== rank {rank} of {topo}")
    print(f"  dense coordinates {info.coord('dense')}, expert {info.coord('expert')}")
    for kind, group in info.groups:
        if group is None:
            print(f"  {kind:>18}: (none)")
        elif len(group) > 8:
            print(f"  {kind:>18}: {len(group)} ranks {group[0]}, {group[1]}, ..., {group[-1]}")
        else:
            print(f"  {kind:>18}: {list(group)} (local rank {group.index(rank)})")
    print(f"  pipeline stage {view.stage} of {view.num_stages}: prev {view.prev}, next {view.next}")


def validate_big_layouts() -> None:
    """A 4096-GPU MoE layout builds in microseconds; a wrong one says why."""
    start = time.perf_counter()
    topo = Topology(4096, tp=8, pp=4, ep=8, etp=1, vpp=2)
    took = (time.perf_counter() - start) * 1e6
    print(f"== 4096 GPUs: {topo}, edp={topo.edp}, built in {took:.0f} us")
    print(f"  rank 4095's expert group: {list(topo.group_of(4095, 'ep'))}")
    print(f"  stage 0 holds layers {topo.layers(0, 32)} (32 layers, vpp=2)")
    for bad in ({"tp": 8, "pp": 3}, {"tp": 8, "pp": 4, "ep": 3}, {"tp": 8, "order": "tp-dp-xp"}):
        try:
            Topology(4096, **bad)  # type: ignore[arg-type]
        except TopologyError as error:
            print(f"  Topology(4096, {bad}) -> TopologyError: {error}")


if __name__ == "__main__":
    show_seed_004()
    explain_rank(Topology(16, tp=2, pp=4), 5)
    validate_big_layouts()
