"""The kind table: every row's size, groups, look-ups and names agree, in every topology.

Laws first (over ``topology.strategies.topologies``), each checked by brute force over all ranks;
then the facts of the table itself (order, applicability, Megatron names).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from tests.test_topology_laws import splits_dp
from topology import Topology, TopologyError
from topology._megatron.kinds import (
    COST_KINDS,
    CROSSING_SEVERITY,
    DENSE_KINDS,
    EXPERT_KINDS,
    KIND_CLASSES,
    MEGATRON_NAMES,
    TABLE,
    canonical_kind,
    spec_of,
)
from topology.cost import DIMENSIONS
from topology.strategies import topologies

BUDGET = settings.default.max_examples
LAWS = settings(max_examples=BUDGET)
ANY = topologies(max_world_size=48)


def members(topo: Topology, kind: str) -> list[int]:
    """The ranks that belong to some group of ``kind``, by brute force."""
    ranks = range(topo.rank_offset, topo.rank_offset + topo.world_size)
    return [r for r in ranks if topo.has_group(r, kind)]


# -- laws ------------------------------------------------------------------------------------------


@LAWS
@given(ANY)
def test_size_is_the_length_of_every_group(topo: Topology) -> None:
    """size(kind) == len(g) for every group g of every kind."""
    for kind in topo.kinds:
        size = topo.size(kind)
        assert all(len(group) == size for group in topo.groups(kind)), kind


@LAWS
@given(ANY)
def test_groups_partition_the_member_ranks(topo: Topology) -> None:
    """The groups of a kind hold each member rank once; members are all ranks but embeddings'."""
    everyone = list(range(topo.rank_offset, topo.rank_offset + topo.world_size))
    for kind in topo.kinds:
        held = sorted(r for group in topo.groups(kind) for r in group)
        assert held == members(topo, kind), kind
        if kind not in ("embedding", "position-embedding"):
            assert held == everyone, kind


@LAWS
@given(ANY)
def test_embedding_members_are_the_ranks_of_their_stages(topo: Topology) -> None:
    """has_group says yes exactly on the ranks of the embedding stages."""
    for kind, stages in (
        ("embedding", topo.embedding_stages),
        ("position-embedding", topo.position_embedding_stages),
    ):
        expected = range(topo.rank_offset, topo.rank_offset + topo.world_size)
        assert members(topo, kind) == [r for r in expected if topo.stage(r) in stages]


@LAWS
@given(ANY)
def test_locate_points_at_the_rank(topo: Topology) -> None:
    """locate(r) = (i, j) means groups()[i][j] == r; group_of(r) is groups()[i]."""
    for kind in topo.kinds:
        groups = list(topo.groups(kind))
        for rank in members(topo, kind):
            index, local = topo.locate(rank, kind)
            assert groups[index][local] == rank, (kind, rank)
            assert topo.group_of(rank, kind) == groups[index], (kind, rank)
            assert topo.group_index(rank, kind) == index
            assert topo.local_rank(rank, kind) == local


@LAWS
@given(ANY)
def test_non_members_are_refused(topo: Topology) -> None:
    """A rank outside every group of a kind gets a TopologyError from locate and group_of."""
    for kind in ("embedding", "position-embedding"):
        for rank in range(topo.rank_offset, topo.rank_offset + topo.world_size):
            if topo.has_group(rank, kind):
                continue
            with pytest.raises(TopologyError, match=f"belongs to no {kind} group"):
                topo.locate(rank, kind)
            with pytest.raises(TopologyError, match=f"belongs to no {kind} group"):
                topo.group_of(rank, kind)


@LAWS
@given(ANY)
def test_kind_names_round_trip(topo: Topology) -> None:
    """kind(name).name is name; a grid kind's groups are its grid's groups along its axes."""
    for name in topo.kinds:
        kind = topo.kind(name)
        assert kind.name == name
        assert kind.megatron_names == spec_of(name).megatron_names
        if kind.grid is None:
            assert kind.axes == ()
        else:
            assert list(kind.grid.groups(*kind.axes)) == list(topo.groups(name))
            assert kind.grid.size(*kind.axes) == topo.size(name)


@LAWS
@given(ANY)
def test_megatron_names_map_to_their_row(topo: Topology) -> None:
    """Each Megatron name of a row gives that row's kind: same name, groups and size."""
    for spec in TABLE:
        for name in spec.names(topo):
            for short in spec.megatron_names:
                assert topo.kind(short) == topo.kind(name), short
                assert list(topo.groups(short)) == list(topo.groups(name)), short
                assert topo.size(short) == topo.size(name)


@LAWS
@given(ANY)
def test_kinds_are_the_rows_that_apply_in_table_order(topo: Topology) -> None:
    """kinds lists each applying row's kinds in table order: dist-opt rows need instances > 1,
    GTP rows their GTP size > 1."""
    expected: list[str] = []
    for spec in TABLE:
        if spec.needs == "dist_opt_instances" and topo.dist_opt_instances == 1:
            continue
        if spec.needs in ("gtp", "egtp") and getattr(topo, spec.needs) == 1:
            continue
        if spec.needs == "dp_split" and not splits_dp(topo):
            continue
        if spec.needs == "hcp_sizes":
            expected += [f"hcp-{k}" for k in range(len(topo.hcp_sizes or ()))]
            continue
        expected.append(spec.name)
    assert list(topo.kinds) == expected
    assert all(spec_of(name).names(topo) for name in topo.kinds)


PARENT = {
    "intra-dp-cp": "dp-cp",
    "intra-edp": "edp",
    "inter-edp": "edp",
    "dp-shard": "dp",
    "dp-replicate": "dp-cp",
}
"""The group each distributed-optimizer split cuts (intra-dist-opt cuts the world)."""


@LAWS
@given(topologies(max_world_size=48, kinds=["intra-dist-opt"]))
def test_groups_per_parent_count_the_groups_inside_one_parent(topo: Topology) -> None:
    """groups_per_parent is how many groups of a split lie inside the parent of group 0, and
    groups k * n .. k * n + n - 1 lie inside one parent."""
    for kind in topo.kinds:
        spec = spec_of(kind)
        if spec.derived is None or spec.derived.per_parent is None:
            continue
        groups = [frozenset(g) for g in topo.groups(kind)]
        n = spec.groups_per_parent(topo)
        if kind == "intra-dist-opt":
            assert n == len(groups)
            continue
        for start in range(0, len(groups), n):
            parent = frozenset(topo.group_of(next(iter(groups[start])), PARENT[kind]))
            assert sum(g <= parent for g in groups) == n, kind
            assert all(g <= parent for g in groups[start : start + n]), kind


# -- the table itself ------------------------------------------------------------------------------


def test_table_holds_every_kind_once_in_creation_order() -> None:
    """The table's rows are Megatron's creation order (the order Topology.kinds keeps)."""
    assert [spec.name for spec in TABLE] == [
        "gtp",
        "dp-cp",
        "intra-dp-cp",
        "dp",
        "gtp-dp",
        "gtp-dp-cp",
        "cp",
        "hcp-<level>",
        "tp-pp",
        "tp",
        "pp",
        "embedding",
        "position-embedding",
        "tp-dp-cp",
        "tp-dp",
        "tp-cp",
        "egtp",
        "ep",
        "etp",
        "etp-ep",
        "etp-ep-pp",
        "etp-ep-egtp-pp",
        "edp",
        "intra-edp",
        "inter-edp",
        "egtp-edp",
        "intra-dist-opt",
        "dp-shard",
        "dp-replicate",
    ]


def test_each_row_is_a_grid_kind_or_a_derived_kind() -> None:
    """A row has a grid and axes, or a Derived; never both, never neither."""
    for spec in TABLE:
        assert (spec.grid is None) == (spec.derived is not None), spec.name
        assert (spec.grid is None) == (spec.axes == ()), spec.name


def test_derived_views_come_from_the_table() -> None:
    """DENSE_KINDS, EXPERT_KINDS and MEGATRON_NAMES list the table's rows and names."""
    assert {s.name: s.axes for s in TABLE if s.grid == "dense"} == DENSE_KINDS
    assert {s.name: s.axes for s in TABLE if s.grid == "expert"} == EXPERT_KINDS
    assert len(MEGATRON_NAMES) == sum(len(s.megatron_names) for s in TABLE)
    for short, name in MEGATRON_NAMES.items():
        assert canonical_kind(short) == name
        assert short in spec_of(name).megatron_names


def test_megatron_names_are_pinned() -> None:
    """Megatron's short names map as in parallel_state (golden table)."""
    assert dict(MEGATRON_NAMES) == {
        "gtp_remat": "gtp",
        "dp_cp": "dp-cp",
        "intra_dp_cp": "intra-dp-cp",
        "gtp_remat_dp": "gtp-dp",
        "gtp_remat_dp_cp": "gtp-dp-cp",
        "mp": "tp-pp",
        "embd": "embedding",
        "pos_embd": "position-embedding",
        "tp_dp_cp": "tp-dp-cp",
        "tp_dp": "tp-dp",
        "tensor_and_data": "tp-dp",
        "tp_cp": "tp-cp",
        "expt_tp": "etp",
        "tp_ep": "etp-ep",
        "expt_gtp_remat": "egtp",
        "tp_ep_pp": "etp-ep-pp",
        "tp_ep_gtp_remat_pp": "etp-ep-egtp-pp",
        "expt_dp": "edp",
        "intra_expt_dp": "intra-edp",
        "inter_dist_opt": "inter-edp",
        "ep_gtp_remat_dp": "egtp-edp",
        "intra_dist_opt": "intra-dist-opt",
    }


@pytest.mark.parametrize(
    ("name", "row"),
    [("hcp-0", "hcp-<level>"), ("hcp-12", "hcp-<level>"), ("tp", "tp"), ("edp", "edp")],
)
def test_spec_of_finds_rows_and_families(name: str, row: str) -> None:
    """spec_of maps a concrete kind to its row; hcp-k to the family row."""
    assert spec_of(name).name == row


@pytest.mark.parametrize("name", ["hcp-", "hcp-x", "xp", "mp", "hcp-<level>x", ""])
def test_spec_of_refuses_names_no_row_gives(name: str) -> None:
    """spec_of takes canonical names only and raises KeyError for the rest."""
    with pytest.raises(KeyError):
        spec_of(name)


@pytest.mark.parametrize(
    ("topo", "absent"),
    [
        (Topology(8), ("intra-dp-cp", "intra-edp", "inter-edp", "intra-dist-opt", "hcp-0")),
        (Topology(8, cp=4, hcp_sizes=(2, 2)), ("hcp-2", "intra-edp")),
    ],
)
def test_kinds_that_do_not_apply_are_unknown(topo: Topology, absent: tuple[str, ...]) -> None:
    """A row that does not apply gives no kind: its names raise 'unknown kind'."""
    for name in absent:
        assert name not in topo.kinds
        with pytest.raises(TopologyError, match=f"unknown kind '{name}'"):
            topo.kind(name)


def test_kind_facts_are_pinned() -> None:
    """Crossing severity, crossing class and cost dimension per row (golden table); every other
    row has none of them."""
    facts = {
        "dp-cp": (None, None, "dp"),
        "dp": (None, (2, 1), None),
        "cp": ("warning", (1, 1), "cp"),
        "tp": ("error", (0, 0), "tp"),
        "pp": (None, (2, 0), "pp"),
        "ep": ("warning", (1, 0), "ep"),
        "etp": ("error", (0, 1), None),
        "edp": (None, (2, 2), "edp"),
    }
    for spec in TABLE:
        found = (spec.crossing_severity, spec.crossing_class, spec.cost_dimension)
        assert found == facts.get(spec.name, (None, None, None)), spec.name


def test_kind_fact_views_come_from_the_table() -> None:
    """CROSSING_SEVERITY (errors first, then table order), KIND_CLASSES and COST_KINDS are the
    rows' facts, as the checks, placement and the cost model used them before."""
    assert list(CROSSING_SEVERITY.items()) == [
        ("tp", "error"),
        ("etp", "error"),
        ("cp", "warning"),
        ("ep", "warning"),
    ]
    assert KIND_CLASSES == (("tp", "etp"), ("ep", "cp"), ("pp", "dp", "edp"))
    assert dict(COST_KINDS) == {
        "tp": "tp",
        "cp": "cp",
        "ep": "ep",
        "pp": "pp",
        "dp": "dp-cp",
        "edp": "edp",
    }
    assert set(COST_KINDS) == set(DIMENSIONS)


def test_only_the_distributed_optimizer_splits_count_groups_per_parent() -> None:
    """per_parent is set exactly on the rows that split dp-cp, dp, edp or the world into
    instances (the only kinds whose groups can be irregular)."""
    splits = {s.name for s in TABLE if s.derived is not None and s.derived.per_parent}
    assert splits == {*PARENT, "intra-dist-opt"}


@pytest.mark.parametrize(
    ("kind", "per_parent"),
    [
        ("intra-dp-cp", 4),
        ("intra-edp", 4),
        ("inter-edp", 2),
        ("intra-dist-opt", 4),
        ("dp-shard", 4),
        ("dp-replicate", 2),
    ],
)
def test_groups_per_parent_golden(kind: str, per_parent: int) -> None:
    """Four instances over dp 8: four shares per parent, two positions across them."""
    topo = Topology(16, tp=2, dp=8, dist_opt_instances=4)
    assert spec_of(kind).groups_per_parent(topo) == per_parent
