"""The job goes on whenever the model survives (issue 31, item 2): a law over random layouts and
failure sets, against a brute force written here from the public per-rank lookups.

A rank's *shard* is its place in every model-parallel group (tp, cp, pp, ep, etp): two ranks
hold the same weights iff these agree. The brute force tries every layout the survivors could
run (the same model parallelism at every smaller multiple of one replica, the
distributed-optimizer instances any divisor of the old count) and says the job can go on iff one
of them needs only shards some survivor holds. ``reshape`` must continue exactly then, and name
for every new rank whose shard changes a surviving holder of it.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Topology, TopologyError, reshape
from topology.strategies import topologies

MODEL_KINDS = ("tp", "cp", "pp", "ep", "etp")
"""The kinds whose place in the group says which weights a rank holds."""


def _shard(topo: Topology, rank: int) -> tuple[int, ...]:
    """Rank ``rank``'s place in each model-parallel group of ``topo``."""
    return tuple(topo.local_rank(rank, kind) for kind in MODEL_KINDS if kind in topo.kinds)


def _ranks(topo: Topology) -> range:
    return range(topo.rank_offset, topo.rank_offset + topo.world_size)


def _layouts(old: Topology, survivors: int) -> list[Topology]:
    """Every layout of the same model parallelism the survivors can fill, largest first."""
    replica = old.world_size // old.dp
    found = []
    for count in range(survivors // replica, 0, -1):
        instances = old.dist_opt_instances
        for divisor in [d for d in range(instances, 0, -1) if instances % d == 0]:
            data = {**old.to_dict(), "world_size": count * replica, "dp": None}
            try:
                found.append(Topology.from_dict({**data, "dist_opt_instances": divisor}))
                break
            except TopologyError:
                continue
    return found


def _can_continue(old: Topology, lost: set[int]) -> bool:
    """Brute force: some layout the survivors fill needs only shards a survivor holds."""
    alive = [r for r in _ranks(old) if r not in lost]
    held = {_shard(old, r) for r in alive}
    return any(
        all(_shard(new, r) in held for r in _ranks(new)) for new in _layouts(old, len(alive))
    )


@st.composite
def failures(draw: st.DrawFn) -> tuple[Topology, list[int]]:
    """A small layout and a set of lost ranks (from one rank to all but one)."""
    topo = draw(topologies(max_world_size=16).filter(lambda t: t.world_size > 1))
    ranks = list(_ranks(topo))
    lost = draw(st.lists(st.sampled_from(ranks), min_size=1, max_size=len(ranks) - 1, unique=True))
    return topo, lost


def _check_holders(old: Topology, lost: set[int]) -> None:
    """``reshape`` continues iff the brute force can, and every moved shard has a named,
    surviving holder of exactly that shard."""
    possible = _can_continue(old, lost)
    try:
        r = reshape(old, lost_ranks=sorted(lost), gpus_per_node=1)
    except TopologyError as error:
        assert not possible, f"reshape refused a job that can go on: {error}"
        return
    assert possible
    fetched = dict(r.sources)
    for new_rank, holder in r.sources:
        assert holder not in lost
        assert _shard(old, holder) == _shard(r.new, new_rank)
    for rank in _ranks(old):
        new_rank = r.rank_of(rank)
        if new_rank is not None and _shard(old, rank) != _shard(r.new, new_rank):
            assert new_rank in fetched
    assert {n for n in map(r.rank_of, _ranks(old)) if n is not None} | set(fetched) == set(
        _ranks(r.new)
    )


@settings(max_examples=150, deadline=None)
@given(failures())
def test_reshape_continues_exactly_when_a_layout_needs_only_surviving_shards(
    case: tuple[Topology, list[int]],
) -> None:
    """The law: continue iff the brute force finds a layout; the holders it names are right."""
    old, lost = case
    _check_holders(old, set(lost))


@settings(max_examples=100, deadline=None)
@given(failures())
def test_every_shard_surviving_means_the_job_goes_on(case: tuple[Topology, list[int]]) -> None:
    """When every shard of the old layout keeps a survivor and some layout of the same model
    parallelism fits the survivors, some policy continues. (Where none fits, e.g. ep 3 at 6
    ranks with one lost, only spares can: no layout of 3 experts runs on 5, 4 or 2 ranks.)"""
    old, lost = case
    alive = [r for r in _ranks(old) if r not in lost]
    if not _layouts(old, len(alive)):
        return
    if {_shard(old, r) for r in alive} != {_shard(old, r) for r in _ranks(old)}:
        return
    r = reshape(old, lost_ranks=lost, gpus_per_node=1)
    assert r.new.world_size <= len(alive)


@pytest.mark.parametrize(
    ("layout", "lost", "policy", "holders"),
    [
        # tp 2 x dp 3 (replicas {0,1} {2,3} {4,5}), ranks 2 and 5 lost, shifted left onto dp 2:
        # survivors 0 1 3 4 become 0 1 2 3; new 2 needs tp rank 0 (first holder: 0), new 3
        # tp rank 1 (first holder: 1).
        (Topology(6, tp=2), [2, 5], "shrink", [(2, 0), (3, 1)]),
        # tp 2 x dp 3 x pp 2 (rank = tp + 2 dp + 6 pp): every replica hit, 5 survivors
        # (1 2 5 10 11) fill one replica as new 0..3 = (tp, pp) (0,0) (1,0) (0,1) (1,1); the
        # last needs (1,1), held only by rank 11, which the new layout leaves idle.
        (
            Topology(12, tp=2, pp=2),
            [0, 3, 4, 6, 7, 8, 9],
            "auto",
            [(0, 2), (1, 1), (2, 10), (3, 11)],
        ),
    ],
)
def test_holders_of_golden_losses(
    layout: Topology, lost: list[int], policy: str, holders: list[tuple[int, int]]
) -> None:
    """Worked cases: the new ranks that fetch, and from which surviving rank."""
    r = reshape(layout, lost_ranks=lost, gpus_per_node=1, policy=policy)
    assert list(r.sources) == holders
    _check_holders(layout, set(lost))


def test_an_idle_survivor_is_a_holder() -> None:
    """The case the old shrink refused ("every replica of the shard ... is lost"): the only
    surviving copy of a shard sits on a rank the new layout leaves idle; it is named."""
    layout = Topology(12, tp=2, pp=2)
    r = reshape(layout, lost_ranks=[0, 3, 4, 6, 7, 8, 9], gpus_per_node=1)
    assert (r.policy, r.new.dp, r.rank_of(11)) == ("shrink", 1, None)
    assert (3, 11) in r.sources


def test_optimizer_instances_follow_the_smaller_data_parallelism() -> None:
    """Four distributed-optimizer instances at dp 4, one rank lost: dp 3 keeps gcd(4, 3) = 1
    instance (the instances split optimizer state, never the model), where it was refused."""
    r = reshape(Topology(8, tp=2, dist_opt_instances=4), lost_ranks=[0], gpus_per_node=1)
    assert (r.policy, r.new.dp, r.new.dist_opt_instances, r.sources) == ("drop", 3, 1, ())
