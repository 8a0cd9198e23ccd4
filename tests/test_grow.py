"""Laws and worked values of ``topology.grow`` (back to a larger layout after a reshape).

Shards are read from the public per-rank lookups (a rank's place in each model-parallel group),
not from the code under test."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Growth, Topology, TopologyError, grow, reshape
from topology.strategies import topologies


def _parts(topo: Topology, rank: int) -> dict[str, tuple[tuple[str, int], ...]]:
    """The rank's coordinates on each grid but its data-parallel axis: which dense weights and
    which experts it holds."""
    parts = {"dense": tuple((a, c) for a, c in topo.dense.coord(rank).items() if a != "dp")}
    if topo.expert is not None:
        parts["expert"] = tuple((a, c) for a, c in topo.expert.coord(rank).items() if a != "edp")
    return parts


def _ranks(topo: Topology) -> range:
    return range(topo.rank_offset, topo.rank_offset + topo.world_size)


@st.composite
def shrunk(draw: st.DrawFn) -> tuple[Topology, Topology]:
    """A layout and a smaller valid one of the same model parallelism (what a reshape left)."""
    big = draw(topologies(max_world_size=32).filter(lambda t: t.dp > 1))
    replica = big.world_size // big.dp
    smaller = []
    for count in range(1, big.dp):
        try:
            smaller.append(
                Topology.from_dict({**big.to_dict(), "world_size": count * replica, "dp": None})
            )
        except TopologyError:
            continue
    small = draw(st.sampled_from(smaller)) if smaller else big
    return small, big


def _check(g: Growth) -> None:
    """Every law of one growth."""
    old, new = g.old, g.new
    survivors = [g.rank_of(r) for r in _ranks(old)]
    assert len(set(survivors)) == len(survivors) and set(survivors) <= set(_ranks(new))
    assert sorted(set(_ranks(new)) - set(survivors)) == list(g.joining)
    was = {g.rank_of(r): r for r in _ranks(old)}
    holders: dict[tuple[str, object], list[int]] = {}
    for rank in _ranks(old):
        for part, key in _parts(old, rank).items():
            holders.setdefault((part, key), []).append(rank)
    sent: dict[tuple[str, int], int] = {}
    receivers: dict[tuple[str, object], int] = {}
    for rank in _ranks(new):
        for part, need in _parts(new, rank).items():
            pulls = [p for p in g.pulls_of(rank) if p.part == part]
            if rank in was and _parts(old, was[rank])[part] == need:
                assert pulls == []  # a survivor keeping a part moves nothing of it
                continue
            have = holders[(part, need)]
            assert [p.piece for p in pulls] == list(range(len(have)))
            assert {p.pieces for p in pulls} == {len(have)}
            assert sorted(p.source for p in pulls) == have  # every holder, once
            receivers[(part, need)] = receivers.get((part, need), 0) + 1
            for p in pulls:
                sent[(part, p.source)] = sent.get((part, p.source), 0) + 1
    for (part, key), ranks in holders.items():  # balanced: one piece per receiver of the part
        for rank in ranks:
            assert sent.get((part, rank), 0) == receivers.get((part, key), 0)
    assert {p.part for p in g.pulls} <= set(_parts(new, new.rank_offset))
    assert g.batch_kept == (g.new.dp * g.accumulation == g.old.dp)


@settings(max_examples=60, deadline=None)
@given(shrunk())
def test_growth_laws(case: tuple[Topology, Topology]) -> None:
    """Survivors keep what they can; a rank lacking a part pulls every piece once, from every
    holder; every holder sends as many pieces as its part has receivers."""
    small, big = case
    _check(grow(small, big))


@settings(max_examples=40, deadline=None)
@given(shrunk(), st.integers(0, 40))
def test_world_size_grows_to_the_largest_valid_layout(
    case: tuple[Topology, Topology], extra: int
) -> None:
    """Given only the ranks now, the target is the largest layout of the same model
    parallelism on at most that many (checked against every smaller multiple of a replica)."""
    small, _ = case
    world = small.world_size + extra
    g = grow(small, world_size=world)
    replica = small.world_size // small.dp
    assert g.new.world_size <= world and g.new.world_size % replica == 0
    for count in range(g.new.world_size // replica + 1, world // replica + 1):
        data = {**small.to_dict(), "world_size": count * replica, "dp": None}
        with pytest.raises(TopologyError):
            Topology.from_dict(data)
    _check(g)


def test_drop_then_grow_back_reuses_the_surviving_replicas() -> None:
    """16 ranks (tp 2, pp 2, dp 4), rank 5 lost: drop leaves dp 3; growing back to the
    original, the three surviving replicas keep their tp, pp and model groups (reused) and only
    the data-parallel families gain members (rebuilt)."""
    original = Topology(16, tp=2, pp=2)
    after = reshape(original, lost_ranks=[5], gpus_per_node=4).new
    g = grow(after, original, accumulation=4)
    assert (g.new, g.accumulation, g.batch_kept) == (original, 3, True)
    changes = {c.kind: c for c in g.communicators}
    for kind, kept, joined in (("tp", 6, 2), ("pp", 6, 2), ("tp-pp", 3, 1)):
        assert (changes[kind].reuse, changes[kind].rebuild) == (kept, joined)
    assert changes["dp"].reuse == 0 and changes["dp"].rebuild == 4
    # replica 3 (ranks 6, 7, 14, 15 in the original numbering) joins; rank 6 is (tp 0, pp 0),
    # held by ranks 0, 2, 4 of the dp-3 layout: one third from each
    assert g.joining == (6, 7, 14, 15)
    # (the expert grid, etp = tp with ep 1, is held alike: MoE layers of this layout)
    pulls = [(p.part, p.source, p.piece, p.pieces) for p in g.pulls_of(6)]
    thirds = [(0, 0, 3), (2, 1, 3), (4, 2, 3)]
    assert pulls == [("dense", *t) for t in thirds] + [("expert", *t) for t in thirds]
    assert all(g.pulls_of(g.rank_of(r)) == () for r in range(12))  # survivors move nothing


def _refused(match: str, *args: object, **kwargs: object) -> None:
    """``grow(*args, **kwargs)`` raises a TopologyError whose whole message is ``match``."""
    with pytest.raises(TopologyError) as error:
        grow(*args, **kwargs)  # type: ignore[arg-type]
    assert str(error.value) == match


def test_grow_refuses_other_model_parallelism_and_fewer_ranks() -> None:
    """A target that shards the model otherwise, or is smaller, is an error that says why."""
    plan = "plan a full re-layout with topology.transfer instead"
    _refused(
        "the target must keep the layout's model parallelism to grow back (tp 2 vs 4, "
        f"pp 1 vs 2); {plan}",
        Topology(4, tp=2),
        Topology(16, tp=4, pp=2),
    )
    _refused(
        f"the target must keep the layout's model parallelism to grow back (the axis order); "
        f"{plan}",
        Topology(4, tp=2),
        Topology(8, tp=2, order="tp-cp-ep-pp-dp"),
    )
    _refused(
        "the target has 4 ranks, fewer than the layout's 8; use reshape to shrink",
        Topology(8, tp=2),
        Topology(4, tp=2),
    )
    _refused(
        "world_size(12) contradicts target.world_size(8); give one of them",
        Topology(4, tp=2),
        Topology(8, tp=2),
        world_size=12,
    )
    _refused("give the layout to grow to (target) or the ranks now (world_size)", Topology(4, tp=2))
    _refused("layout must be a Topology, got 'tp=2'", "tp=2", Topology(8, tp=2))
    _refused("target must be a Topology, got 'x'", Topology(4, tp=2), "x")
    _refused(
        "world_size(2) is less than the layout's 4 ranks; grow goes up, reshape shrinks",
        Topology(4, tp=2),
        world_size=2,
    )
    _refused("world_size must be a positive int, got 0 (int)", Topology(4, tp=2), world_size=0)
    _refused(
        "world_size must be at most 1099511627776 (2**40), the most ranks a layout holds, got "
        "1099511627777",
        Topology(4, tp=2),
        world_size=2**40 + 1,
    )
    _refused(
        "accumulation must be a positive int, got 0 (int)",
        Topology(4, tp=2),
        Topology(8, tp=2),
        accumulation=0,
    )
    g = grow(Topology(4, tp=2), Topology(8, tp=2))
    for outside in (-1, 4, 9):
        with pytest.raises(TopologyError, match=rf"^rank {outside} is not in the layout's ranks"):
            g.rank_of(outside)
    # an offset layout of 4 ranks from rank 4 holds ranks 4, 5, 6, 7: the message names the
    # first and the last (4 + 4 - 1)
    shifted = grow(Topology(4, tp=2, rank_offset=4), Topology(8, tp=2, rank_offset=4))
    for outside in (3, 8):
        with pytest.raises(
            TopologyError, match=rf"^rank {outside} is not in the layout's ranks 4 to 7$"
        ):
            shifted.rank_of(outside)


def test_accumulation_is_exact_past_a_float() -> None:
    """2**60 steps at dp 2 are 2**59 at dp 4 (no float, no bound on the steps)."""
    g = grow(Topology(4, tp=2), Topology(8, tp=2), accumulation=2**60)
    assert (g.accumulation, g.batch_kept) == (2**59, True)


def test_world_size_alone_picks_the_largest_layout() -> None:
    """tp 2 with ep 4 (etp 1) now on 8 ranks, 14 processes: dp 7 would need 14 ranks, but ep 4
    does not divide 14 (edp), so the largest layout is 12 ranks (dp 6)."""
    g = grow(Topology(8, tp=2, ep=4, etp=1), world_size=14)
    assert (g.new.world_size, g.new.dp, len(g.joining)) == (12, 6, 4)
    assert grow(Topology(8, tp=2), world_size=8).new == Topology(8, tp=2)


def test_joining_ranks_take_the_holders_in_turn() -> None:
    """tp 2 from dp 3 to dp 6: tp rank 0 is held by old ranks 0, 2, 4 and lacked by new ranks
    6, 8, 10; the i-th of them takes piece p from holder (i + p) mod 3, so the holders start
    the pieces in turn."""
    g = grow(Topology(6, tp=2), Topology(12, tp=2))
    dense = {rank: [p.source for p in g.pulls_of(rank) if p.part == "dense"] for rank in (6, 8, 10)}
    assert dense == {6: [0, 2, 4], 8: [2, 4, 0], 10: [4, 0, 2]}
    assert g.mapping == (0, 1, 2, 3, 4, 5)


def test_a_dense_only_layout_pulls_only_dense_parts() -> None:
    """ezpz's tp-cp-pp-dp with cp 2 and pp 2 has no expert grid: only dense parts move."""
    small = Topology(16, tp=2, cp=2, pp=2, order="tp-cp-pp-dp")
    assert small.expert is None
    g = grow(small, Topology(32, tp=2, cp=2, pp=2, order="tp-cp-pp-dp"))
    assert {p.part for p in g.pulls} == {"dense"}
    _check(g)


def test_survivors_keep_their_replica_number_across_a_stride_change() -> None:
    """tp 2, pp 2 from dp 3 (rank = tp + 2 dp + 6 pp) to dp 4 (rank = tp + 2 dp + 8 pp): old
    rank 6 (tp 0, dp 0, pp 1) is new rank 8, old 11 (tp 1, dp 2, pp 1) new 13."""
    g = grow(Topology(12, tp=2, pp=2), Topology(16, tp=2, pp=2))
    assert g.mapping == (0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13)


def test_expert_survivors_keep_their_shards_where_dense_coordinates_would_move_them() -> None:
    """tp 2, ep 4 (etp 1, order tp-cp-ep-dp-pp: ep over the ranks) from 4 to 8 ranks: the four
    survivors hold experts 0 1 2 3 on tp ranks 0 1 0 1 and keep both parts on new ranks 0-3;
    ranks 4-7 pull their dense part from the two holders of their tp rank and their experts
    from the one holder of each."""
    g = grow(Topology(4, tp=2, ep=4, etp=1), Topology(8, tp=2, ep=4, etp=1))
    assert g.mapping == (0, 1, 2, 3) and g.joining == (4, 5, 6, 7)
    assert [(p.part, p.source) for p in g.pulls_of(5)] == [
        ("dense", 1),
        ("dense", 3),
        ("expert", 1),
    ]
    _check(g)


def test_a_survivor_pulls_the_experts_its_new_place_needs() -> None:
    """tp 2, cp 2, ep 4 (etp 1, order tp-cp-dp-ep-pp) from 4 to 8 ranks: old ranks 1 and 2 pair
    (cp 0, tp 1) with expert 1 and (cp 1, tp 0) with expert 2, which no rank of the 8 does
    (there expert e sits on ranks 2e and 2e + 1). Ranks 0 and 3 keep their whole shard (new 0
    and 7); ranks 1 and 2 keep their dense part on new ranks 1 and 2 and pull the experts
    those places hold (experts 0 and 1, each from its one holder)."""
    order = "tp-cp-dp-ep-pp"
    g = grow(
        Topology(4, tp=2, cp=2, ep=4, etp=1, order=order),
        Topology(8, tp=2, cp=2, ep=4, etp=1, order=order),
    )
    assert g.mapping == (0, 1, 2, 7) and g.joining == (3, 4, 5, 6)
    assert [(p.part, p.source, p.pieces) for p in g.pulls_of(1)] == [("expert", 0, 1)]
    assert [(p.part, p.source, p.pieces) for p in g.pulls_of(2)] == [("expert", 1, 1)]
    assert g.pulls_of(0) == g.pulls_of(7) == ()
    _check(g)
