"""Laws and golden values of ``topology.reshape`` (re-layout after lost ranks or hosts)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Allocation, Host, Reshape, Tier, Topology, TopologyError, check, reshape
from topology.strategies import topologies

FEW = settings(max_examples=25, deadline=None)


@st.composite
def losses(draw: st.DrawFn) -> tuple[Topology, int, list[int]]:
    """A layout, a host size dividing it, and one to three lost ranks."""
    topo = draw(topologies(max_world_size=32))
    gpus = draw(st.sampled_from([g for g in (1, 2, 4, 8) if topo.world_size % g == 0]))
    ranks = range(topo.rank_offset, topo.rank_offset + topo.world_size)
    lost = draw(st.lists(st.sampled_from(ranks), min_size=1, max_size=3, unique=True))
    return topo, gpus, lost


def _shard(topo: Topology, rank: int) -> tuple[tuple[str, int], ...]:
    """The rank's coordinates on every axis but the replica axes dp and edp."""
    dense = [(a, c) for a, c in topo.dense.coord(rank).items() if a != "dp"]
    expert = [] if topo.expert is None else list(topo.expert.coord(rank).items())
    return tuple(dense + [("e" + a, c) for a, c in expert if a != "edp"])


def _mapped(r: Reshape, group: tuple[int, ...]) -> tuple[int | None, ...]:
    return tuple(r.rank_of(m) for m in group)


def _try(topo: Topology, gpus: int, lost: list[int], policy: str) -> Reshape | None:
    try:
        return reshape(topo, lost_ranks=lost, gpus_per_node=gpus, policy=policy)
    except TopologyError as error:
        assert "replica" in str(error) or "layout" in str(error)  # it says why
        return None


@FEW
@given(losses(), st.sampled_from(["drop", "shrink", "auto"]))
def test_reused_and_trimmed_groups_are_old_groups(case: tuple, policy: str) -> None:
    """Reused groups are old groups mapped; trimmed ones are old groups minus leaving members."""
    r = _try(*case, policy)
    if r is None:
        return
    for change in r.communicators:
        if change.kind not in r.old.kinds:
            continue
        new_groups = {tuple(g) for g in r.new.groups(change.kind)}
        whole = {_mapped(r, g) for g in r.old.groups(change.kind)}
        assert sum(1 for g in new_groups if g in whole) == change.reuse
        olds = r.old.groups(change.kind)
        for index, leave in change.trims:
            group = olds[index]
            assert leave and all(r.rank_of(group[i]) is None for i in leave)
            rest = tuple(r.rank_of(m) for i, m in enumerate(group) if i not in leave)
            assert rest in new_groups


@FEW
@given(losses())
def test_drop_keeps_every_active_survivor_on_its_shard(case: tuple) -> None:
    """With drop-replica every active survivor keeps its coordinates, and nothing moves."""
    r = _try(*case, "drop")
    if r is None:
        return
    for old in range(r.old.rank_offset, r.old.rank_offset + r.old.world_size):
        new = r.rank_of(old)
        if new is not None:
            assert _shard(r.old, old) == _shard(r.new, new)
    assert r.sources == () and r.kept == r.active == r.new.world_size


@FEW
@given(losses(), st.sampled_from(["drop", "shrink", "auto"]))
def test_new_layout_is_valid_and_every_shard_has_a_holder(case: tuple, policy: str) -> None:
    """The new layout is valid, the map is onto it, and every new rank's shard has a holder."""
    r = _try(*case, policy)
    if r is None:
        return
    assert Topology(**r.new.to_dict()) == r.new
    targets = [t for t in r.mapping if t is not None]
    assert len(set(targets)) == len(targets) == r.new.world_size
    assert all(r.rank_of(x) is None for x in r.lost)
    holders = dict(r.sources)
    for old in range(r.old.rank_offset, r.old.rank_offset + r.old.world_size):
        new = r.rank_of(old)
        if new is None:
            continue
        holder = holders.get(new, old)
        assert holder not in r.lost  # a survivor; one left idle may hold it (it sends, leaves)
        assert _shard(r.old, holder) == _shard(r.new, new)


def test_golden_16384_ranks_one_node_lost_no_spare() -> None:
    """tp 8, pp 8, one 8-GPU node lost: 0 rebuilt, only the dp family trimmed, all keep."""
    r = reshape(Topology(16384, tp=8, pp=8), lost_hosts=[3], gpus_per_node=8)
    assert (r.policy, r.new.dp, r.active, r.kept) == ("drop", 255, 16320, 16320)
    assert r.counts() == {"reuse": 47430, "trim": 208, "rebuild": 0}
    trimmed = {c.kind for c in r.communicators if c.trim}
    assert trimmed == {"dp-cp", "dp", "tp-dp-cp", "tp-dp", "edp"}
    assert (r.accumulation, r.batch_kept) == (1, False)


def test_golden_spare_in_the_same_rack_keeps_every_position() -> None:
    """A spare in the lost host's rack is taken; every rank keeps its number and shard."""
    topo = Topology(64, tp=8, pp=2)
    racks = ["a", "b", "a", "a", "a", "a", "a", "a", "a", "b"]  # hosts 8 and 9 are spares
    hosts = [Host(f"n{i}", 8, (rack,)) for i, rack in enumerate(racks)]
    allocation = Allocation(hosts, (Tier("rack"),))
    r = reshape(topo, lost_hosts=[1], gpus_per_node=8, allocation=allocation, policy="spares")
    assert r.new == topo and r.replaced == ((1, 9),)
    assert all(r.rank_of(x) == x for x in range(64) if not 8 <= x < 16)
    assert r.moved == tuple(range(8, 16)) and r.counts()["trim"] == 0


def test_without_an_allocation_the_first_spare_is_taken() -> None:
    """Spares given as host numbers are taken in the order given."""
    r = reshape(Topology(64, tp=8, pp=2), lost_hosts=[1], gpus_per_node=8, spares=[9, 8])
    assert r.policy == "spares"  # auto prefers given spares: the layout and the batch stay
    assert r.replaced == ((1, 9),) and r.batch_kept
    r = reshape(
        Topology(64, tp=8, pp=2), lost_hosts=[1], gpus_per_node=8, spares=[9, 8], policy="spares"
    )
    assert r.replaced == ((1, 9),)


def test_accumulation_keeps_the_global_batch() -> None:
    """Dropping one of four replicas at 3 steps gives 4 steps: 4 * 3 == 3 * 4."""
    r = reshape(Topology(16, tp=2, pp=2), lost_ranks=[5], gpus_per_node=2, accumulation=3)
    assert (r.new.dp, r.accumulation, r.batch_kept) == (3, 4, True)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lost_ranks": [16]}, r"lost rank 16 is outside the layout's ranks 0 to 15"),
        ({}, r"no rank is lost; give lost_ranks or lost_hosts"),
        ({"lost_ranks": [1], "policy": "x"}, r"policy must be one of auto, drop, spares, shrink"),
        ({"lost_ranks": [0, 2, 4, 6]}, r"every one of the 4 data-parallel replicas holds a lost"),
        ({"lost_ranks": [1], "policy": "spares"}, r"1 hosts are lost \(host0\) but only 0 spares"),
        ({"lost_ranks": [1], "spares": [3]}, r"spares must be distinct hosts outside"),
        ({"lost_hosts": [9]}, r"lost host 9 is outside the 8 hosts 0 to 7"),
        ({"lost_ranks": [1], "allocation": "x"}, r"allocation must be an Allocation, got 'x'"),
    ],
)
def test_errors_say_why(kwargs: dict, match: str) -> None:
    """Invalid input, or a job that cannot continue, raises a TopologyError naming the reason."""
    with pytest.raises(TopologyError, match=match):
        reshape(Topology(16, tp=2, pp=2), gpus_per_node=2, **kwargs)


def test_too_few_survivors_cannot_continue() -> None:
    """When the survivors cannot hold one replica, auto says the job cannot continue."""
    with pytest.raises(
        TopologyError, match=r"the job cannot continue: .*one model replica needs 4"
    ):
        reshape(Topology(4, tp=2, pp=2), lost_ranks=[0], gpus_per_node=2)


def test_every_replica_of_a_shard_lost_cannot_continue() -> None:
    """When both holders of one shard are lost, the error names that shard."""
    with pytest.raises(TopologyError, match=r"every replica of the shard of new rank 0"):
        reshape(Topology(8, tp=2, pp=2), lost_ranks=[0, 2], gpus_per_node=2)


def test_moe_drops_an_aligned_block_of_replicas() -> None:
    """With ep 2 over dp, dropping replica 1 alone breaks ep | dp; the block {0, 1} keeps it."""
    r = reshape(Topology(32, tp=2, ep=2), lost_ranks=[2], gpus_per_node=2)
    assert (r.policy, r.new.dp, r.active, r.kept) == ("drop", 14, 28, 28)
    assert (r.rank_of(0), r.rank_of(4), r.rank_of(6)) == (None, 0, 2)
    assert r.counts()["rebuild"] == 0


def test_kind_table_marks_the_data_parallel_kinds_by_their_axes() -> None:
    """A grid row is data-parallel iff it spans dp or edp; a replica row spans nothing else."""
    from topology._megatron.kinds import TABLE

    for spec in TABLE:
        if spec.grid is not None:
            spans = bool({"dp", "edp"} & set(spec.axes))
            assert (spec.data_parallel is not None) == spans, spec.name
            if spec.data_parallel == "replica":
                assert len(spec.axes) == 1, spec.name


@pytest.mark.parametrize("policy", ["drop", "shrink"])
def test_new_rank_map_launches_and_passes_check(policy: str) -> None:
    """Each surviving host's active ranks form one aligned block of new ranks, so the hosts in
    new-rank order are a launch (rank r on host r // G), and that rank map passes ``check``."""
    gpus = 8
    topo = Topology(512, tp=8, pp=4)
    r = reshape(topo, lost_hosts=[3], gpus_per_node=gpus, policy=policy)
    blocks: dict[int, int] = {}  # first new rank of a host's block -> old host
    for host in range(topo.world_size // gpus):
        new = [r.rank_of(host * gpus + g) for g in range(gpus)]
        if all(n is None for n in new):
            continue
        assert None not in new and new == list(range(new[0], new[0] + gpus)), (host, new)
        assert new[0] % gpus == 0
        blocks[new[0]] = host
    assert sorted(blocks) == list(range(0, r.new.world_size, gpus))
    hosts = [Host(f"n{blocks[first]}", gpus, ()) for first in sorted(blocks)]
    report = check(r.new, Allocation(hosts, ()).rank_map(r.new.world_size))
    assert report.ok, report.errors
