"""Placement rows against a count over every group, on small nodes and offset layouts.

The reference: rank ``r`` runs on node ``r // gpus_per_node`` and in NVLink domain
``r // domain``; a group spans the distinct nodes (domains) of its ranks. Nodes of 1, 2, 3, 4 and
6 GPUs and rank offsets that are not multiples of them are where the analytic placement's
residue cases (a group straddling a node boundary, copies that merge or stay apart) differ.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Cluster, Topology
from topology._layout.spans import Shape, units_spanned
from topology._preflight.placement import crosses_domains, placement, placements
from topology.strategies import topologies

# Example budget relative to the loaded profile (100 in ci/dev, fewer in `mutation`).
BUDGET = settings.default.max_examples

SMALL_NODES = (1, 2, 3, 4, 6)


def nodes_of(group: tuple[int, ...] | list[int], unit: int) -> int:
    """How many units of ``unit`` consecutive ranks hold ``group``."""
    return len({r // unit for r in group})


@st.composite
def offset_layouts(draw: st.DrawFn) -> tuple[Topology, Cluster]:
    """A small topology moved to a drawn rank offset, on small nodes and domains."""
    gpus = draw(st.sampled_from(SMALL_NODES))
    topo = draw(topologies(max_world_size=48, max_rank_offset=0))
    offset = draw(st.integers(0, 3 * gpus))
    domain = draw(st.none() | st.sampled_from((1, 2, 3, 4, 6, 8, 12)))
    return attrs.evolve(topo, rank_offset=offset), Cluster(gpus, nvlink_domain=domain)


@settings(max_examples=3 * BUDGET)
@given(offset_layouts())
def test_placement_rows_equal_a_count_over_every_group(layout: tuple[Topology, Cluster]) -> None:
    """Most and fewest nodes, most domains, size, count and example equal brute force."""
    topo, cluster = layout
    for row in placements(topo, cluster):
        groups = [tuple(g) for g in topo.groups(row.kind)]
        nodes = [nodes_of(g, cluster.gpus_per_node) for g in groups]
        domains = [nodes_of(g, cluster.domain_size) for g in groups]
        assert (row.nodes, row.nodes_min, row.domains) == (max(nodes), min(nodes), max(domains))
        assert (row.size, row.groups, row.exact) == (len(groups[0]), len(groups), True)
        assert tuple(row.example) in groups
        assert nodes_of(tuple(row.example), cluster.gpus_per_node) == row.nodes
        assert row.best_nodes == -(-row.size // cluster.gpus_per_node)
        assert row.intra_node == (max(nodes) == 1)
        assert row.intra_domain == (max(domains) == 1)


@settings(max_examples=3 * BUDGET)
@given(
    st.integers(0, 40),
    st.lists(st.tuples(st.integers(1, 4), st.integers(1, 12)), min_size=1, max_size=3),
    st.sampled_from((*SMALL_NODES, 5, 8)),
)
def test_units_spanned_equals_a_count_of_the_points(
    base: int, digits: list[tuple[int, int]], unit: int
) -> None:
    """units_spanned(base, runs, u) counts the units of every point of the runs."""
    runs: list[tuple[int, int]] = []
    for size, gap in digits:  # each stride exceeds the largest point of the runs below it
        top = sum((s - 1) * d for s, d in runs)
        runs.append((size, top + gap))
    points = {base}
    for size, stride in runs:
        points = {p + c * stride for p in points for c in range(size)}
    assert units_spanned(base, tuple(runs), unit) == (nodes_of(sorted(points), unit), True)


@settings(max_examples=3 * BUDGET)
@given(offset_layouts())
def test_crosses_domains_equals_a_count_over_every_group(layout: tuple[Topology, Cluster]) -> None:
    """crosses_domains is True exactly when some group holds ranks of two NVLink domains."""
    topo, cluster = layout
    for kind in topo.kinds:
        domains = [nodes_of(tuple(g), cluster.domain_size) for g in topo.groups(kind)]
        assert crosses_domains(topo, cluster, kind) == (max(domains) > 1), kind


def test_crosses_domains_is_exact_where_the_placement_row_is_sampled() -> None:
    """More offsets than the residue budget: the row samples them, crosses_domains does not."""
    topo, cluster = Topology(2000, tp=2, order="dp-tp-cp-ep-pp"), Cluster(8, nvlink_domain=1600)
    row = placement(topo, cluster, "tp")
    assert (row.domains, row.exact) == (1, False)  # groups from rank 600 on reach rank 1600
    assert crosses_domains(topo, cluster, "tp")
    assert any(len({r // 1600 for r in g}) > 1 for g in topo.groups("tp"))


def test_explicit_shape_counts_its_offsets() -> None:
    """A shape given by explicit offsets (embedding on stages 0, 1, 3) counts those ranks."""
    shape = Shape(None, (0, 2, 6), (), 1)
    assert shape.units_spanned(1, 4) == (2, True)  # ranks 1, 3, 7 on nodes 0, 0, 1
    assert shape.units_spanned(3, 4) == (3, True)  # ranks 3, 5, 9 on nodes 0, 1, 2
    assert list(shape.group(3)) == [3, 5, 9]


@pytest.mark.parametrize(
    ("topo", "gpus", "kind", "most", "fewest", "example"),
    [
        # ranks 1..8 on 4-GPU nodes 0, 0, 0, 1, 1, 1, 1, 2: the tp-dp group 3, 4, 7, 8 touches
        # nodes 0, 1 and 2; 1, 2, 5, 6 touches nodes 0 and 1.
        (Topology(8, tp=2, pp=2, order="tp-cp-pp-dp-ep", rank_offset=1), 4, "tp-dp", 3, 2, None),
        # tp groups (1, 2), (3, 4), (5, 6), (7, 8): (3, 4) straddles the 4-GPU boundary.
        (Topology(8, tp=2, pp=2, order="tp-cp-pp-dp-ep", rank_offset=1), 4, "tp", 2, 1, (3, 4)),
        # pp groups (1, 3), (2, 4), (5, 7), (6, 8) on 2-GPU nodes: every group spans 2 nodes.
        (Topology(8, tp=2, pp=2, order="tp-cp-pp-dp-ep", rank_offset=1), 2, "pp", 2, 2, None),
        # 3-GPU nodes, offset 2: dp groups (2, 4), (3, 5): nodes {0, 1} and {1}.
        (Topology(4, tp=2, rank_offset=2), 3, "dp", 2, 1, (2, 4)),
        # one GPU per node: every group spans as many nodes as it has ranks.
        (Topology(12, tp=3, pp=2, rank_offset=5), 1, "tp-pp", 6, 6, None),
        # 6-GPU nodes, offset 3: tp groups of 6 from rank 3 all straddle two nodes.
        (Topology(12, tp=6, rank_offset=3), 6, "tp", 2, 2, None),
    ],
)
def test_hand_counted_small_layouts(
    topo: Topology,
    gpus: int,
    kind: str,
    most: int,
    fewest: int,
    example: tuple[int, ...] | None,
) -> None:
    """Rows of layouts counted by hand (node = rank // gpus_per_node)."""
    row = placement(topo, Cluster(gpus), kind)
    assert (row.nodes, row.nodes_min) == (most, fewest)
    if example is not None:
        assert row.example == example
