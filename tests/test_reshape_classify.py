"""``reshape``'s communicator counts against a reference that lists every group (seeded cases).

The counts are computed by arithmetic on each kind's translate shape; the reference here maps
every old group and compares sets, as the definition reads: a new group is reused when it is an
old group mapped, trimmed when it is an old group minus the members that leave, else rebuilt.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Reshape, Topology, TopologyError, reshape
from topology.strategies import topologies

FEW = settings(max_examples=25, deadline=None)


def _reference(r: Reshape) -> list[tuple[object, ...]]:
    """``(kind, reuse, trim, rebuild, gone, trims)`` of every new kind, from listed groups."""
    rows: list[tuple[object, ...]] = []
    for kind in r.new.kinds:
        news = [tuple(g) for g in r.new.groups(kind)]
        if kind not in r.old.kinds:
            rows.append((kind, 0, 0, len(news), 0, ()))
            continue
        whole, part, gone = set(), {}, 0
        for index, group in enumerate(r.old.groups(kind)):
            mapped = [r.rank_of(m) for m in group]
            kept = tuple(m for m in mapped if m is not None)
            gone += not kept
            if len(kept) == len(mapped):
                whole.add(kept)
            elif kept:
                part[kept] = (index, tuple(i for i, m in enumerate(mapped) if m is None))
        reuse = sum(1 for g in news if g in whole)
        trims = tuple(part[g] for g in news if g in part)
        rows.append((kind, reuse, len(trims), len(news) - reuse - len(trims), gone, trims))
    return rows


def _counted(r: Reshape) -> list[tuple[object, ...]]:
    return [(c.kind, c.reuse, c.trim, c.rebuild, c.gone, c.trims) for c in r.communicators]


@st.composite
def losses(draw: st.DrawFn) -> tuple[Topology, int, list[int], list[int]]:
    """A layout, a host size dividing it, one to four lost ranks and up to two spare hosts."""
    topo = draw(topologies(max_world_size=64))
    gpus = draw(st.sampled_from([g for g in (1, 2, 4, 8) if topo.world_size % g == 0]))
    ranks = range(topo.rank_offset, topo.rank_offset + topo.world_size)
    lost = draw(st.lists(st.sampled_from(ranks), min_size=1, max_size=4, unique=True))
    hosts = topo.world_size // gpus
    spares = draw(st.lists(st.integers(hosts, hosts + 3), max_size=2, unique=True))
    return topo, gpus, lost, spares


@FEW
@given(losses(), st.sampled_from(["drop", "spares", "shrink"]))
def test_counts_equal_the_listed_reference(case: tuple, policy: str) -> None:
    """Every kind's reuse / trim / rebuild / gone counts and trims equal the reference."""
    topo, gpus, lost, spares = case
    try:
        r = reshape(topo, lost_ranks=lost, gpus_per_node=gpus, spares=spares, policy=policy)
    except TopologyError:
        return
    assert _counted(r) == _reference(r)


@pytest.mark.parametrize(
    ("layout", "lost"),
    [
        # gapped embeddings (stages 1 and 3: a regular shape that starts past stage 0) and an
        # irregular one (stages 0, 1, 3: listed), expert and context axes, an offset
        (Topology(256, tp=2, pp=4, cp=2, ep=2, embedding_stages=[1, 3]), [5, 77]),
        (Topology(256, tp=2, pp=4, ep=4, embedding_stages=[0, 1, 3], rank_offset=8), [40]),
        (Topology(256, tp=4, pp=2, cp=2, hcp_sizes=[2], dist_opt_instances=2), [130, 131]),
    ],
)
@pytest.mark.parametrize("policy", ["drop", "spares", "shrink"])
def test_seeded_layouts_equal_the_listed_reference(
    layout: Topology, lost: list[int], policy: str
) -> None:
    """Hand-picked layouts (gapped and irregular shapes, offsets) match the reference."""
    r = reshape(layout, lost_ranks=lost, gpus_per_node=4, spares=[64, 65], policy=policy)
    assert _counted(r) == _reference(r)
