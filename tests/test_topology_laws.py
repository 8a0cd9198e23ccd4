"""Laws of Topology, checked against a brute-force model of Megatron's layout written here.

The reference model (independent of the code under test):

* the order string is completed with the missing tokens in Megatron's order (tp, pp, dp, ep, cp);
* the dense grid has sizes tp, cp, dp, pp (ep = 1), the expert grid etp, ep, edp, pp (cp = 1);
  tokens are listed innermost first, so enumerating ``itertools.product`` over the reversed
  order gives the ranks ``rank_offset, rank_offset + 1, ...`` in turn;
* a group of a kind is the set of ranks sharing the coordinates of every token outside the kind,
  in enumeration order; groups are listed by smallest rank;
* where the expert grid would put pipeline stages on other ranks than the dense grid (possible
  only without MoE folding; Megatron then refuses), the expert kinds take their dense meaning;
* derived kinds follow Megatron's ``initialize_model_parallel`` loops (embedding ranks per pp
  group, ``create_hierarchical_groups`` for hcp and partial expert-dp, consecutive slices for
  intra-dp-cp, consecutive blocks of etp-ep-pp groups for intra-dist-opt).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from math import prod
from typing import Any

import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from topology import Topology, TopologyError
from topology.strategies import grids, ranks, topologies

# Example budget relative to the loaded profile (100 in ci/dev, fewer in `mutation`).
BUDGET = settings.default.max_examples

CHEAP = settings(max_examples=2 * BUDGET)
MEDIUM = settings(max_examples=BUDGET)

Groups = list[tuple[int, ...]]

DENSE_KINDS = {
    "dp-cp": {"dp", "cp"},
    "dp": {"dp"},
    "cp": {"cp"},
    "tp-pp": {"tp", "pp"},
    "tp": {"tp"},
    "pp": {"pp"},
    "tp-dp-cp": {"tp", "dp", "cp"},
    "tp-dp": {"tp", "dp"},
    "tp-cp": {"tp", "cp"},
}
EXPERT_KINDS = {  # in the expert grid's token space: tp means etp, dp means edp
    "ep": {"ep"},
    "etp": {"tp"},
    "etp-ep": {"tp", "ep"},
    "etp-ep-pp": {"tp", "ep", "pp"},
    "edp": {"dp"},
}
EXPERT_AS_DENSE = {
    "ep": set(),
    "etp": {"tp"},
    "etp-ep": {"tp"},
    "etp-ep-pp": {"tp", "pp"},
    "edp": {"dp", "cp"},
}
GRID_KINDS = [*DENSE_KINDS, *EXPERT_KINDS]


# -- the reference model --------------------------------------------------------------------------


def completed_order(order: str) -> list[str]:
    """Megatron's RankGenerator: missing tokens are appended in the order tp, pp, dp, ep, cp."""
    tokens = order.split("-")
    return tokens + [t for t in ("tp", "pp", "dp", "ep", "cp") if t not in tokens]


def enumerate_coords(sizes: dict[str, int], order: list[str]) -> list[dict[str, int]]:
    """The coordinates of rank ``offset + n`` at index n (the first token varies fastest)."""
    outer_first = order[::-1]
    cells = itertools.product(*(range(sizes[t]) for t in outer_first))
    return [dict(zip(outer_first, cell, strict=True)) for cell in cells]


def grid_groups(sizes: dict[str, int], order: list[str], offset: int, axes: set[str]) -> Groups:
    """Ranks sharing every coordinate outside ``axes``, grouped and listed by smallest rank."""
    buckets: dict[tuple[int, ...], list[int]] = {}
    for n, coord in enumerate(enumerate_coords(sizes, order)):
        key = tuple(coord[t] for t in order if t not in axes)
        buckets.setdefault(key, []).append(offset + n)
    return sorted((tuple(g) for g in buckets.values()), key=lambda g: g[0])


def dense_sizes(topo: Topology) -> dict[str, int]:
    """Sizes of the dense grid by order token."""
    return {"tp": topo.tp, "cp": topo.cp, "ep": 1, "dp": topo.dp or 0, "pp": topo.pp}


def expert_sizes(topo: Topology) -> dict[str, int]:
    """Sizes of the expert grid by order token (tp is etp, dp is edp)."""
    etp = topo.etp or topo.tp
    edp = topo.world_size // (etp * topo.ep * topo.pp)
    return {"tp": etp, "cp": 1, "ep": topo.ep, "dp": edp, "pp": topo.pp}


def reference_grid_groups(topo: Topology, kind: str) -> Groups:
    """The brute-force groups of a grid kind."""
    order = completed_order(topo.order)
    offset = topo.rank_offset
    if kind in DENSE_KINDS:
        return grid_groups(dense_sizes(topo), order, offset, DENSE_KINDS[kind])
    dense_pp = grid_groups(dense_sizes(topo), order, offset, {"pp"})
    expert_pp = grid_groups(expert_sizes(topo), order, offset, {"pp"})
    if dense_pp != expert_pp:
        return grid_groups(dense_sizes(topo), order, offset, EXPERT_AS_DENSE[kind])
    return grid_groups(expert_sizes(topo), order, offset, EXPERT_KINDS[kind])


def hierarchical_levels(ranks: tuple[int, ...], sizes: tuple[int, ...]) -> list[Groups]:
    """Megatron's ``create_hierarchical_groups``: rearrange '(l s u) -> (l u) s' per level."""
    levels = []
    for level, s in enumerate(sizes):
        u = prod(sizes[:level])
        ell = prod(sizes[level + 1 :])
        groups = [
            tuple(ranks[li * s * u + si * u + ui] for si in range(s))
            for li in range(ell)
            for ui in range(u)
        ]
        levels.append(groups)
    return levels


def reference_derived_groups(topo: Topology, kind: str) -> Groups:
    """The derived kinds, by Megatron's loops over the grid groups."""
    pp = topo.pp
    if kind in ("embedding", "position-embedding"):
        stages = topo.embedding_stages if kind == "embedding" else topo.position_embedding_stages
        chosen = sorted({s % pp for s in stages})
        return [tuple(g[s] for s in chosen) for g in reference_grid_groups(topo, "pp")]
    n = topo.dist_opt_instances
    if kind.startswith("hcp-"):
        level = int(kind[4:])
        sizes = topo.hcp_sizes or ()
        return [
            g
            for cp_group in reference_grid_groups(topo, "cp")
            for g in hierarchical_levels(cp_group, sizes)[level]
        ]
    if kind == "intra-dp-cp":
        width = topo.dp * topo.cp // n  # type: ignore[operator]
        return [
            g[i * width : (i + 1) * width]
            for g in reference_grid_groups(topo, "dp-cp")
            for i in range(n)
        ]
    edp = expert_sizes(topo)["dp"]
    if kind in ("intra-edp", "inter-edp"):
        level = 0 if kind == "intra-edp" else 1
        return [
            g
            for edp_group in reference_grid_groups(topo, "edp")
            for g in hierarchical_levels(edp_group, (edp // n, n))[level]
        ]
    if kind in ("dp-shard", "dp-replicate"):
        # dp coordinate d = instance * width + position: dp-shard varies the position inside one
        # instance, dp-replicate the instance at one position (of the dp-cp group's dp part).
        width = topo.dp // n
        if kind == "dp-shard":
            return [
                g[i * width : (i + 1) * width]
                for g in reference_grid_groups(topo, "dp")
                for i in range(n)
            ]
        share = topo.dp * topo.cp // n  # type: ignore[operator]
        return [g[j::share] for g in reference_grid_groups(topo, "dp-cp") for j in range(share)]
    assert kind == "intra-dist-opt"
    blocks: Groups = []
    pending: list[int] = []
    for count, group in enumerate(reference_grid_groups(topo, "etp-ep-pp"), start=1):
        pending.extend(group)
        if count % (edp // n) == 0:
            blocks.append(tuple(sorted(pending)))
            pending = []
    return blocks


TABLE_KINDS = {  # the rows of DESIGN 2.2's kind table that every topology defines
    *("tp", "cp", "dp", "pp"),
    *("dp-cp", "tp-pp", "tp-cp", "tp-dp", "tp-dp-cp"),
    *("ep", "etp", "edp", "etp-ep", "etp-ep-pp"),
    *("embedding", "position-embedding"),
}
DIST_OPT_KINDS = {"intra-dp-cp", "intra-edp", "inter-edp", "intra-dist-opt"}
SPLIT_KINDS = ("dp-shard", "dp-replicate")  # after Megatron's kinds: Megatron makes no such group


def splits_dp(topo: Topology) -> bool:
    """The instances cut the dp axis: they divide dp, and cp (if any) is listed before dp in the
    order (it varies faster)."""
    n = topo.dist_opt_instances
    tokens = topo.order.split("-")
    cp_inner = topo.cp == 1 or tokens.index("cp") < tokens.index("dp")
    return n > 1 and topo.dp % n == 0 and cp_inner


# Megatron-core 0.16's initialize_model_parallel creates its groups in this order (dp_cp with
# intra_dp_cp, dp, cp with the hcp levels, mp, tp, pp with embd and pos_embd, tp_dp_cp,
# tp_dp, tp_cp, then the expert groups ep, expt_tp, tp_ep, tp_ep_pp, expt_dp with
# intra_expt_dp, inter_dist_opt and intra_dist_opt), for a layout with two hcp levels and two
# distributed-optimizer instances.
MEGATRON_CREATION_ORDER = (
    "dp-cp",
    "intra-dp-cp",
    "dp",
    "cp",
    "hcp-0",
    "hcp-1",
    "tp-pp",
    "tp",
    "pp",
    "embedding",
    "position-embedding",
    "tp-dp-cp",
    "tp-dp",
    "tp-cp",
    "ep",
    "etp",
    "etp-ep",
    "etp-ep-pp",
    "edp",
    "intra-edp",
    "inter-edp",
    "intra-dist-opt",
)


def creation_slot(kind: str) -> tuple[int, int]:
    """Where Megatron creates ``kind``: its slot in the order above (hcp levels by level)."""
    if kind.startswith("hcp-"):
        return MEGATRON_CREATION_ORDER.index("hcp-0"), int(kind[4:])
    if kind in SPLIT_KINDS:
        return len(MEGATRON_CREATION_ORDER), SPLIT_KINDS.index(kind)
    return MEGATRON_CREATION_ORDER.index(kind), 0


def all_ranks(topo: Topology) -> range:
    """Every rank of the layout."""
    return range(topo.rank_offset, topo.rank_offset + topo.world_size)


def is_partition(groups: Iterable[tuple[int, ...]], ranks: Iterable[int]) -> bool:
    """True if ``groups`` are disjoint and together hold exactly ``ranks``."""
    flat = [r for g in groups for r in g]
    return sorted(flat) == sorted(ranks)


@st.composite
def topology_and_rank(draw: st.DrawFn) -> tuple[Topology, int]:
    """A topology and one of its ranks."""
    topo = draw(topologies())
    return topo, draw(ranks(topo))


# -- differential laws --------------------------------------------------------------------------


@CHEAP
@given(topologies())
def test_grid_kinds_match_brute_force(topo: Topology) -> None:
    """Every grid kind's groups equal the brute-force grouping, in the same order."""
    for kind in GRID_KINDS:
        assert list(topo.groups(kind)) == reference_grid_groups(topo, kind), kind


@CHEAP
@given(topologies(kinds=["hcp-0", "intra-dist-opt"]))
def test_derived_kinds_match_reference_with_instances(topo: Topology) -> None:
    """Embedding, hcp and dist-opt kinds equal Megatron's loops (intra-dist-opt sorted)."""
    derived = [k for k in topo.kinds if k not in GRID_KINDS]
    assert "hcp-0" in derived and "intra-dist-opt" in derived
    for kind in derived:
        assert list(topo.groups(kind)) == reference_derived_groups(topo, kind), kind


@CHEAP
@given(topologies())
def test_derived_kinds_match_reference(topo: Topology) -> None:
    """Derived kinds of any topology equal the reference."""
    for kind in topo.kinds:
        if kind not in GRID_KINDS:
            assert list(topo.groups(kind)) == reference_derived_groups(topo, kind), kind


@CHEAP
@given(topologies())
def test_kinds_are_the_design_table(topo: Topology) -> None:
    """kinds is the DESIGN table, one hcp level per hcp size, dist-opt kinds only with N > 1."""
    levels = {f"hcp-{k}" for k in range(len(topo.hcp_sizes or ()))}
    dist_opt = DIST_OPT_KINDS if topo.dist_opt_instances > 1 else set()
    split = set(SPLIT_KINDS) if splits_dp(topo) else set()
    assert len(set(topo.kinds)) == len(topo.kinds)
    assert set(topo.kinds) == TABLE_KINDS | levels | dist_opt | split


@CHEAP
@given(topologies())
def test_kinds_come_in_megatron_creation_order(topo: Topology) -> None:
    """Any two kinds come in the order Megatron creates their groups."""
    assert list(topo.kinds) == sorted(topo.kinds, key=creation_slot)


def test_kinds_of_a_full_layout() -> None:
    """A layout with every optional kind lists Megatron's whole creation order."""
    topo = Topology(64, tp=2, cp=4, ep=2, pp=2, dist_opt_instances=2, hcp_sizes=(2, 2))
    assert topo.kinds == MEGATRON_CREATION_ORDER + SPLIT_KINDS


# -- structural laws ----------------------------------------------------------------------------


@CHEAP
@given(topologies())
def test_grid_kinds_partition_the_ranks(topo: Topology) -> None:
    """Each grid kind's groups partition the ranks into groups of size(kind) ranks."""
    for kind in GRID_KINDS:
        groups = list(topo.groups(kind))
        assert is_partition(groups, all_ranks(topo)), kind
        assert {len(g) for g in groups} == {topo.size(kind)}, kind


@CHEAP
@given(topologies())
def test_group_sizes_are_products_of_axis_sizes(topo: Topology) -> None:
    """size(kind) is the product of the sizes of the kind's axes."""
    dense = dense_sizes(topo)
    expert = expert_sizes(topo)
    for kind, axes in DENSE_KINDS.items():
        assert topo.size(kind) == prod(dense[a] for a in axes), kind
    if topo.expert is not None:
        for kind, axes in EXPERT_KINDS.items():
            assert topo.size(kind) == prod(expert[a] for a in axes), kind


@CHEAP
@given(topologies())
def test_grid_groups_ascend_and_are_ordered(topo: Topology) -> None:
    """Grid kinds: every group ascends, groups are ordered by their smallest rank."""
    for kind in GRID_KINDS:
        groups = list(topo.groups(kind))
        assert all(list(g) == sorted(g) for g in groups), kind
        assert [g[0] for g in groups] == sorted(g[0] for g in groups), kind


@MEDIUM
@given(topologies())
def test_indexing_matches_iteration_for_every_kind(topo: Topology) -> None:
    """groups(kind)[i] is the i-th iterated group and len matches, for every kind."""
    for kind in topo.kinds:
        lazy = topo.groups(kind)
        listed = list(lazy)
        assert len(lazy) == len(listed), kind
        assert [lazy[i] for i in range(len(lazy))] == listed, kind


@CHEAP
@given(topology_and_rank())
def test_group_of_is_a_group_that_holds_the_rank(case: tuple[Topology, int]) -> None:
    """group_of(r, k) is in groups(k), holds r at local_rank, at index group_index."""
    topo, rank = case
    for kind in topo.kinds:
        if not topo.has_group(rank, kind):
            assert kind in ("embedding", "position-embedding")
            with pytest.raises(TopologyError, match=f"rank {rank} belongs to no {kind} group"):
                topo.group_of(rank, kind)
            continue
        group = topo.group_of(rank, kind)
        assert group in list(topo.groups(kind)), kind
        assert group[topo.local_rank(rank, kind)] == rank, kind
        assert topo.groups(kind)[topo.group_index(rank, kind)] == group, kind


@CHEAP
@given(topology_and_rank())
def test_position_in_group_is_the_coordinate(case: tuple[Topology, int]) -> None:
    """A rank's position in a dense group is its mixed-radix coordinate over the kind's axes."""
    topo, rank = case
    order = completed_order(topo.order)
    sizes = dense_sizes(topo)
    coord = enumerate_coords(sizes, order)[rank - topo.rank_offset]
    for kind, axes in DENSE_KINDS.items():
        position, scale = 0, 1
        for token in order:
            if token in axes:
                position += coord[token] * scale
                scale *= sizes[token]
        assert topo.local_rank(rank, kind) == position, kind


def reference_groups(topo: Topology, kind: str) -> Groups:
    """The brute-force groups of any kind."""
    if kind in GRID_KINDS:
        return reference_grid_groups(topo, kind)
    return reference_derived_groups(topo, kind)


@CHEAP
@given(topology_and_rank())
def test_rank_info_matches_brute_force_membership(case: tuple[Topology, int]) -> None:
    """rank_info(r) holds, per kind, the brute-force group containing r (None if none)."""
    topo, rank = case
    info = topo.rank_info(rank)
    assert info.rank == rank
    for kind in topo.kinds:
        holding = [g for g in reference_groups(topo, kind) if rank in g]
        assert len(holding) <= 1, kind
        if not holding:
            assert info.group(kind) is None and info.local_rank(kind) is None, kind
            continue
        assert info.group(kind) == holding[0], kind
        assert info.local_rank(kind) == holding[0].index(rank), kind
    assert [kind for kind, _ in info.groups] == list(topo.kinds)


@CHEAP
@given(topology_and_rank())
def test_rank_info_coordinates_are_the_enumerated_ones(case: tuple[Topology, int]) -> None:
    """rank_info(r)'s coordinates are r's place in the row-major enumeration of each grid."""
    topo, rank = case
    info = topo.rank_info(rank)
    order = completed_order(topo.order)
    dense = enumerate_coords(dense_sizes(topo), order)[rank - topo.rank_offset]
    assert info.coord("dense") == {t: dense[t] for t in order[::-1] if t != "ep"}
    assert list(info.coord()) == [t for t in order[::-1] if t != "ep"]
    if topo.expert is None:
        assert info.coord("expert") == {}
    else:
        expert = enumerate_coords(expert_sizes(topo), order)[rank - topo.rank_offset]
        names = {"tp": "etp", "dp": "edp"}
        assert info.coord("expert") == {
            names.get(t, t): expert[t] for t in order[::-1] if t != "cp"
        }
    pipe = next(g for g in reference_grid_groups(topo, "pp") if rank in g)
    assert info.pipeline.stage == dense["pp"] == pipe.index(rank)
    assert info.pipeline.ranks == pipe


@CHEAP
@given(topology_and_rank())
def test_rank_info_to_dict_is_json_of_the_same_facts(case: tuple[Topology, int]) -> None:
    """to_dict() survives JSON and repeats the groups, local ranks and sizes."""
    topo, rank = case
    data = json.loads(json.dumps(topo.rank_info(rank).to_dict()))
    assert data["rank"] == rank and data["pipeline"]["rank"] == rank
    assert list(data["groups"]) == list(topo.kinds)
    for kind, entry in data["groups"].items():
        holding = [g for g in reference_groups(topo, kind) if rank in g]
        if not holding:
            assert entry is None, kind
            continue
        assert entry == {
            "ranks": list(holding[0]),
            "local_rank": holding[0].index(rank),
            "size": len(holding[0]),
        }, kind


@CHEAP
@given(topology_and_rank())
def test_in_embedding_follows_stage_and_virtual_chunk(case: tuple[Topology, int]) -> None:
    """in_embedding(r) is membership of an embedding group; with vpp only the outer chunks."""
    topo, rank = case
    member = any(rank in g for g in reference_derived_groups(topo, "embedding"))
    assert topo.in_embedding(rank) == member
    assert topo.pipeline(rank).in_embedding == member
    position = any(rank in g for g in reference_derived_groups(topo, "position-embedding"))
    assert topo.pipeline(rank).in_position_embedding == position
    stage = next(g for g in reference_grid_groups(topo, "pp") if rank in g).index(rank)
    chunks = topo.vpp or 1
    for v in range(chunks):
        if topo.vpp is None:
            expected = member
        elif stage == 0:
            expected = member and v == 0
        elif stage == topo.pp - 1:
            expected = member and v == chunks - 1
        else:
            expected = member
        assert topo.in_embedding(rank, vp_stage=v) == expected, v


@CHEAP
@given(topologies())
def test_embedding_ranks_lie_in_their_pp_group(topo: Topology) -> None:
    """Each embedding / position-embedding group is a subset of one pp group, at its stages."""
    pp_groups = list(topo.groups("pp"))
    for kind in ("embedding", "position-embedding"):
        groups = list(topo.groups(kind))
        assert len(groups) == len(pp_groups)
        for group, pipe in zip(groups, pp_groups, strict=True):
            assert set(group) <= set(pipe)
            for rank in group:
                assert topo.group_of(rank, "pp") == pipe


@CHEAP
@given(topology_and_rank())
def test_pipeline_next_and_prev_are_inverse(case: tuple[Topology, int]) -> None:
    """prev(next(r)) == r == next(prev(r)), both in r's pp group, one stage apart (wrapping)."""
    topo, rank = case
    view = topo.pipeline(rank)
    assert topo.pipeline(view.next).prev == rank
    assert topo.pipeline(view.prev).next == rank
    pipe = topo.group_of(rank, "pp")
    assert view.ranks == pipe and view.num_stages == topo.pp
    assert view.stage == pipe.index(rank) == topo.stage(rank)
    assert topo.stage(view.next) == (view.stage + 1) % topo.pp
    assert (view.first, view.last) == (pipe[0], pipe[-1])
    assert view.is_first == (view.stage == 0) == topo.is_first_stage(rank)
    assert view.is_last == (view.stage == topo.pp - 1) == topo.is_last_stage(rank)


@CHEAP
@given(topologies())
def test_expert_and_dense_pp_groups_coincide(topo: Topology) -> None:
    """Both grids put the same ranks in each pipeline; etp-ep-pp groups are unions of them."""
    if topo.expert is not None:
        assert list(topo.expert.groups("pp")) == list(topo.dense.groups("pp"))
    pp_groups = {frozenset(g) for g in topo.groups("pp")}
    for group in topo.groups("etp-ep-pp"):
        assert is_partition([g for g in topo.groups("pp") if set(g) <= set(group)], group)
    assert len(pp_groups) == len(topo.groups("pp"))


@CHEAP
@given(topologies())
def test_json_round_trip_is_identity(topo: Topology) -> None:
    """from_dict(json(to_dict())) gives an equal, equally-hashed topology with the same groups."""
    again = Topology.from_dict(json.loads(json.dumps(topo.to_dict())))
    assert again == topo and hash(again) == hash(topo)
    assert again.to_dict() == topo.to_dict()
    for kind in topo.kinds:
        assert list(again.groups(kind)) == list(topo.groups(kind))


@CHEAP
@given(topologies(kinds=["hcp-0"]))
def test_hierarchical_levels_partition_each_cp_group(topo: Topology) -> None:
    """Each hcp level's groups partition every cp group into groups of that level's size."""
    sizes = topo.hcp_sizes or ()
    assert prod(sizes) == topo.cp
    for level, size in enumerate(sizes):
        groups = list(topo.groups(f"hcp-{level}"))
        for cp_group in topo.groups("cp"):
            inside = [g for g in groups if set(g) <= set(cp_group)]
            assert is_partition(inside, cp_group)
            assert all(len(g) == size for g in inside)
        assert is_partition(groups, all_ranks(topo))


@CHEAP
@given(topologies(kinds=["intra-dist-opt"]))
def test_dist_opt_kinds_partition_their_parents(topo: Topology) -> None:
    """intra-dp-cp splits dp-cp, intra-/inter-edp split edp, intra-dist-opt splits the world."""
    n = topo.dist_opt_instances
    parents = {"intra-dp-cp": "dp-cp", "intra-edp": "edp", "inter-edp": "edp"}
    for kind, parent in parents.items():
        groups = list(topo.groups(kind))
        for big in topo.groups(parent):
            inside = [g for g in groups if set(g) <= set(big)]
            assert is_partition(inside, big), kind
        assert is_partition(groups, all_ranks(topo)), kind
    for intra in topo.groups("intra-edp"):
        for inter in topo.groups("inter-edp"):
            assert len(set(intra) & set(inter)) <= 1
    blocks = list(topo.groups("intra-dist-opt"))
    assert len(blocks) == n and is_partition(blocks, all_ranks(topo))
    for group in topo.groups("etp-ep-pp"):
        assert any(set(group) <= set(block) for block in blocks)


@CHEAP
@given(topologies(), st.integers(1, 4))
def test_virtual_layers_cover_the_model_once(topo: Topology, per_chunk: int) -> None:
    """layers() over all stages and chunks covers range(num_layers) once; chunk v of p is v*pp+p."""
    chunks = topo.vpp or 1
    num_layers = topo.pp * chunks * per_chunk
    held = [topo.layers(p, num_layers) for p in range(topo.pp)]
    assert sorted(x for stage in held for chunk in stage for x in chunk) == list(range(num_layers))
    for p, stage in enumerate(held):
        assert len(stage) == chunks
        for v, chunk in enumerate(stage):
            start = (v * topo.pp + p) * per_chunk
            assert chunk == tuple(range(start, start + per_chunk))


@CHEAP
@given(topology_and_rank())
def test_virtual_first_and_last_stage(case: tuple[Topology, int]) -> None:
    """With vpp, only chunk 0 of stage 0 is first and chunk vpp-1 of the last stage is last."""
    topo, rank = case
    chunks = topo.vpp or 1
    stage = topo.stage(rank)
    for v in range(chunks):
        assert topo.is_first_stage(rank, vp_stage=v) == (stage == 0 and v == 0)
        assert topo.is_last_stage(rank, vp_stage=v) == (stage == topo.pp - 1 and v == chunks - 1)


@CHEAP
@given(topologies())
def test_megatron_aliases_name_the_same_groups(topo: Topology) -> None:
    """Megatron's short names (mp, dp_cp, expt_dp, ...) give the same groups as ours."""
    aliases = {
        "mp": "tp-pp",
        "dp_cp": "dp-cp",
        "tp_dp_cp": "tp-dp-cp",
        "tp_cp": "tp-cp",
        "expt_tp": "etp",
        "expt_dp": "edp",
        "tp_ep": "etp-ep",
        "tp_ep_pp": "etp-ep-pp",
        "embd": "embedding",
        "pos_embd": "position-embedding",
        "cp-dp": "dp-cp",
    }
    for alias, kind in aliases.items():
        assert list(topo.groups(alias)) == list(topo.groups(kind)), alias


@CHEAP
@given(topologies())
def test_text_forms_stay_short(topo: Topology) -> None:
    """str is a one-liner and repr never dumps rank lists."""
    assert "\n" not in str(topo)
    assert len(repr(topo)) < 300 and len(str(topo)) < 200
    assert eval(repr(topo), {"Topology": Topology}) == topo


@settings(max_examples=min(30, BUDGET))
@given(topologies(max_world_size=1024, max_size=32))
def test_large_worlds_stay_lazy(topo: Topology) -> None:
    """len, [0], [-1] and group_of answer without enumerating a large world."""
    for kind in topo.kinds:
        lazy = topo.groups(kind)
        assert len(lazy) * topo.size(kind) <= topo.world_size, kind
        last = lazy[-1]
        assert last == lazy[len(lazy) - 1]
        if topo.has_group(last[0], kind):
            assert topo.group_of(last[0], kind) == last


# -- examples -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given_order", "completed"),
    [
        ("tp-dp", "tp-dp-pp-ep-cp"),
        ("dp", "dp-tp-pp-ep-cp"),
        ("pp-cp", "pp-cp-tp-dp-ep"),
        ("tp-pp-dp", "tp-pp-dp-ep-cp"),
        ("cp", "cp-tp-pp-dp-ep"),
        ("ep-tp", "ep-tp-pp-dp-cp"),
    ],
)
def test_order_is_completed_as_megatron_does(given_order: str, completed: str) -> None:
    """Missing tokens are appended in RankGenerator's order: tp, pp, dp, ep, cp."""
    assert Topology(1, order=given_order).order == completed


@CHEAP
@given(topologies())
def test_normalised_order_names_every_token_once(topo: Topology) -> None:
    """The stored order is a permutation of the five tokens."""
    assert sorted(topo.order.split("-")) == sorted(["tp", "cp", "ep", "dp", "pp"])


# -- the strategies themselves --------------------------------------------------------------------


def test_topologies_shrink_to_the_simplest_layout() -> None:
    """The minimal topology is one rank, sizes 1, Megatron's default order, no options."""
    assert find(topologies(), lambda topo: True) == Topology(1)


@pytest.mark.parametrize(
    "strategy",
    [
        topologies(max_world_size=0),
        topologies(kinds=["xp"]),
        topologies(kinds=["hcp-5"], max_hcp_levels=2),
        topologies(moe="yes"),  # type: ignore[arg-type]
        topologies(max_size=0),
        topologies(kinds=["intra-dist-opt"], max_world_size=1),
        grids(max_axes=9),
        grids(min_axes=0),
        grids(max_axes=2, min_axes=3),
        grids(axis_names=["tp", "tp"]),
        ranks("not a topology"),  # type: ignore[arg-type]
    ],
)
def test_bad_strategy_arguments_raise_invalid_argument(strategy: st.SearchStrategy[Any]) -> None:
    """Bad bounds raise InvalidArgument when drawn (not when the strategy is built)."""
    with pytest.raises(InvalidArgument):
        find(strategy, lambda value: True)


@settings(max_examples=min(50, BUDGET))
@given(topologies(moe=False, max_world_size=8, max_rank_offset=0))
def test_topologies_respect_their_bounds(topo: Topology) -> None:
    """moe=False keeps ep = 1 and etp = tp; the world and offset stay within bounds."""
    assert topo.ep == 1 and topo.etp == topo.tp
    assert topo.world_size <= 8 and topo.rank_offset == 0


def test_rank_info_rejects_unknown_grids_and_kinds() -> None:
    """coord() knows two grids, group() the topology's kinds and Megatron's names."""
    info = Topology(8, tp=2, pp=2).rank_info(5)
    with pytest.raises(TopologyError, match="grid must be 'dense' or 'expert', got 'moe'"):
        info.coord("moe")
    with pytest.raises(TopologyError, match="unknown kind 'xp'; valid kinds: dp-cp, dp, cp"):
        info.group("xp")
    assert info.group("mp") == info.group("tp-pp") == (0, 1, 4, 5)  # dp coordinate 0
    assert repr(info).startswith("RankInfo(rank=5, dense={'pp': 1, 'dp': 0, 'cp': 0, 'tp': 1}")
    assert "groups=<16 of 16 kinds>" in repr(Topology(8, tp=2).rank_info(0))
