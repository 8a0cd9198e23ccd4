"""Communicator counts with ``separate`` and ``independent`` kinds, against a count of rank sets.

The reference lists every group of every kind and counts distinct rank sets (frozensets): kinds
in ``separate`` share with nobody, so each of their groups is one more communicator; each kind in
``independent`` adds one copy of its groups, copies of equal group families being one. Nothing
here uses the layout algebra (shape keys) the code compares kinds by.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Topology, TopologyError
from topology._layout.ranks import Ranks
from topology._preflight.communicators import (
    _per_parent,
    _same_set,
    _spread,
    communicators,
    rank_communicators,
)
from topology.strategies import topologies

# Example budget relative to the loaded profile (100 in ci/dev, fewer in `mutation`).
BUDGET = settings().max_examples

Family = frozenset[frozenset[int]]


def family(topo: Topology, kind: str) -> Family:
    """The groups of ``kind`` as a set of rank sets."""
    return frozenset(frozenset(g) for g in topo.groups(kind))


def joined(topo: Topology, rank: int) -> list[str]:
    """The non-singleton kinds that give ``rank`` a group, in ``topo.kinds`` order."""
    return [k for k in topo.kinds if topo.size(k) > 1 and topo.has_group(rank, k)]


def copied_families(topo: Topology, independent: frozenset[str]) -> list[tuple[str, Family]]:
    """The independent kinds whose copy is new (first kind of each distinct group family)."""
    found: list[tuple[str, Family]] = []
    for kind in topo.kinds:
        if kind in independent and topo.size(kind) > 1:
            groups = family(topo, kind)
            if all(groups != seen for _, seen in found):
                found.append((kind, groups))
    return found


@st.composite
def layouts_and_kinds(draw: st.DrawFn) -> tuple[Topology, frozenset[str], frozenset[str]]:
    """A small topology and two drawn subsets of its kinds (separate, independent)."""
    topo = draw(topologies(max_world_size=32))
    separate = draw(st.frozensets(st.sampled_from(topo.kinds), max_size=3))
    independent = draw(st.frozensets(st.sampled_from(topo.kinds), max_size=3))
    return topo, separate, independent


@settings(max_examples=min(60, BUDGET))
@given(layouts_and_kinds(), st.data())
def test_rank_communicators_equal_a_count_of_rank_sets(
    layout: tuple[Topology, frozenset[str], frozenset[str]], data: st.DataObject
) -> None:
    """Each separate kind of the rank, then the first kind of each distinct rank set of the rest."""
    topo, separate, _ = layout
    rank = data.draw(st.integers(topo.rank_offset, topo.rank_offset + topo.world_size - 1))
    found = rank_communicators(topo, rank, separate=sorted(separate))
    mine = joined(topo, rank)
    assert [k for k in found if k in separate] == [k for k in mine if k in separate]
    shared = [k for k in mine if k not in separate]
    sets = [frozenset(topo.group_of(rank, k)) for k in shared]
    firsts = [k for i, k in enumerate(shared) if sets[i] not in sets[:i]]
    assert [k for k in found if k not in separate] == firsts
    assert set(found) <= set(mine)


@settings(max_examples=min(60, BUDGET))
@given(layouts_and_kinds())
def test_communicators_with_separate_and_independent_equal_a_count_of_rank_sets(
    layout: tuple[Topology, frozenset[str], frozenset[str]],
) -> None:
    """all, per-rank min/max and local equal counting distinct rank sets over every group."""
    topo, separate, independent = layout
    apart = [k for k in topo.kinds if k in separate and topo.size(k) > 1]
    together = [k for k in topo.kinds if k not in separate and topo.size(k) > 1]
    copies = copied_families(topo, independent)
    distinct = {g for k in together for g in family(topo, k)}
    expected_all = (
        len(distinct)
        + sum(len(topo.groups(k)) for k in apart)
        + sum(len(groups) for _, groups in copies)
    )
    per_rank = []
    for rank in range(topo.rank_offset, topo.rank_offset + topo.world_size):
        mine = joined(topo, rank)
        sets = {frozenset(topo.group_of(rank, k)) for k in mine if k not in separate}
        extra = sum(k in separate for k in mine) + sum(k in mine for k, _ in copies)
        per_rank.append(len(sets) + extra)
    counts = communicators(topo, separate=sorted(separate), independent=sorted(independent))
    assert counts.all == expected_all
    assert (counts.per_rank_min, counts.per_rank_max) == (min(per_rank), max(per_rank))
    assert counts.local == max(per_rank)


@settings(max_examples=min(60, BUDGET))
@given(layouts_and_kinds())
def test_shared_pairs_are_the_later_kinds_of_equal_families(
    layout: tuple[Topology, frozenset[str], frozenset[str]],
) -> None:
    """shared pairs each non-separate kind with the first earlier kind of the same groups."""
    topo, separate, _ = layout
    together = [k for k in topo.kinds if k not in separate and topo.size(k) > 1]
    families = [family(topo, k) for k in together]
    expected = [
        (kind, together[families.index(families[i])])
        for i, kind in enumerate(together)
        if families.index(families[i]) < i
    ]
    assert list(communicators(topo, separate=sorted(separate)).shared) == expected


def test_megatron_names_are_accepted_for_separate_kinds() -> None:
    """separate=("mp",) is separate=("tp-pp",): mp is Megatron's name of the tp-pp groups."""
    topo = Topology(8, tp=2, pp=2)
    by_alias = rank_communicators(topo, 0, separate=("mp",))
    assert by_alias == rank_communicators(topo, 0, separate=("tp-pp",))
    assert "tp-pp" in by_alias


@pytest.mark.parametrize("value", ["dp", 3, None])
def test_separate_must_be_a_sequence_of_kinds(value: object) -> None:
    """A string or a non-iterable for separate raises, naming separate and showing the value."""
    with pytest.raises(TopologyError, match=r"^separate must be a sequence of kinds such as"):
        rank_communicators(Topology(8, tp=2), 0, separate=value)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match=r"^separate must be a sequence of kinds such as"):
        communicators(Topology(8, tp=2), separate=value)  # type: ignore[arg-type]


def test_independent_must_be_a_sequence_of_kinds() -> None:
    """A string for independent raises, naming independent and showing the value."""
    with pytest.raises(
        TopologyError, match=r"^independent must be a sequence of kinds such as \('dp',\), got 'tp'"
    ):
        communicators(Topology(8, tp=2), independent="tp")


# -- comparing large rank sets by their pieces ------------------------------------------------

LARGE = 1 << 17
"""Past the 2**16 ranks up to which sets are compared rank by rank."""


@pytest.mark.parametrize(
    ("one", "other", "same"),
    [
        (range(LARGE), range(LARGE), True),
        (range(LARGE), range(1, LARGE + 1), False),  # shifted by one
        (range(LARGE), range(0, 2 * LARGE, 2), False),  # same length, every other rank
        (range(LARGE), range(LARGE - 1), False),  # one rank short
        (range(0, 3 * LARGE, 3), range(0, 3 * LARGE, 3), True),
    ],
)
def test_same_set_of_large_rank_sets(one: range, other: range, same: bool) -> None:
    """Large sets are equal exactly when they hold the same ranks (compared by their pieces)."""
    assert _same_set(Ranks.of(one), Ranks.of(other)) is same


def test_same_set_compares_unstructured_sets_rank_by_rank_up_to_the_limit() -> None:
    """2**16 ranks with no run structure (squares) still compare equal to themselves."""
    squares = tuple(i * i for i in range(1 << 16))
    assert _same_set(Ranks.of(squares), Ranks.of(squares))
    assert not _same_set(Ranks.of(squares), Ranks.of((*squares[:-1], squares[-1] + 1)))


# -- sampling an irregular kind: chunks per parent group and spread indices --------------------

PARENT = {"intra-dp-cp": "dp-cp", "intra-edp": "edp", "inter-edp": "edp"}
"""The group each distributed-optimizer chunk kind cuts."""


@settings(max_examples=min(40, BUDGET))
@given(topologies(max_world_size=48, kinds=["intra-dist-opt"]))
def test_chunks_per_parent_equal_a_count_of_the_chunks_inside_one_parent(topo: Topology) -> None:
    """_per_parent is how many groups of the kind lie inside the parent group of group 0."""
    for kind, parent in PARENT.items():
        if kind not in topo.kinds:
            continue
        first = frozenset(topo.group_of(topo.groups(kind)[0][0], parent))
        inside = sum(frozenset(g) <= first for g in topo.groups(kind))
        assert _per_parent(topo, kind) == inside, kind


@pytest.mark.parametrize("count", [1, 2, 63, 64])
def test_spread_of_few_indices_is_all_of_them(count: int) -> None:
    """Up to 64 indices are all taken, in order."""
    assert _spread(count) == list(range(count))


@pytest.mark.parametrize("count", [65, 100, 127, 128, 1000, 4097])
def test_spread_of_many_indices_takes_64_evenly_from_first_to_last(count: int) -> None:
    """Past 64, 64 distinct ints from 0 to count - 1 whose gaps differ by at most one."""
    picked = _spread(count)
    assert all(type(i) is int for i in picked)
    assert len(set(picked)) == len(picked) == 64 and picked == sorted(picked)
    assert (picked[0], picked[-1]) == (0, count - 1)
    gaps = {b - a for a, b in itertools.pairwise(picked)}
    assert max(gaps) - min(gaps) <= 1
