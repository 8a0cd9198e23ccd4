"""Issues 25 and 31: a 16-rank gloo job loses a rank three times, agrees, applies the reshape
and trains on; agree_lost's numbering, generations and store."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import timedelta
from unittest import mock

import attrs
import pytest
import torch
import torch.distributed as dist

from tests.torch import grow_run, recovery_run
from tests.torch.world import JOIN, fake_world, run_world
from topology import Topology, TopologyError, grow, reshape
from topology_torch import ProcessGroups, recovery

SHORT = timedelta(milliseconds=200)
TIMEOUT, DEADLINE = 3.0, 9.0  # seconds: the groups' and agree_lost's (3x: arrival spread, loaded)


def test_the_survivors_train_on_after_each_of_three_failures_as_a_fresh_run_would() -> None:
    """After each of three kills (dp 4 -> 3 -> 2 -> 1), agree_lost names the victim in the
    layout's ranks, and losses and weights equal a fresh run of the new layout from the same
    weights."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "times.json")
        run_world(
            16,
            recovery_run.run,
            out,
            TIMEOUT,
            DEADLINE,
            killed=recovery_run.VICTIMS,
            store="tcp",
        )
        with open(out) as file:
            times = json.load(file)
    assert len(times["losses"]) == recovery_run.STEPS
    for n in range(1, len(recovery_run.VICTIMS) + 1):
        assert times[f"killed {n}"] < times[f"agreed {n}"] < times[f"first step {n}"]


def test_after_a_kill_and_a_shrink_new_processes_grow_the_job_back_to_its_layout() -> None:
    """dp 4 -> 3 after a kill, then 4 new processes join (no restart of the survivors): right
    after the growth every replica holds the same weights, and the losses equal a fresh run of
    the original layout from them (bitwise) and an uninterrupted run (to grow_run.RTOL)."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "times.json")
        run_world(
            16,
            grow_run.run,
            out,
            TIMEOUT,
            DEADLINE,
            killed=(grow_run.VICTIM,),
            store="agent",
            joining=grow_run.JOINING,
            join=grow_run.join,
        )
        with open(out) as file:
            times = json.load(file)
    assert len(times["losses"]) == grow_run.STEPS
    assert times["killed"] < times["spawned"] < times["grown"] < times["first step"]


def test_the_lowest_survivor_decides_that_the_silent_ranks_are_lost() -> None:
    """Rank 1 of 2, alone on the store, decides after its deadline that rank 0 is lost."""
    with fake_world(2, 1):
        assert recovery.agree_lost(generation=0, deadline=SHORT, store=dist.HashStore()) == (0,)


def test_a_decision_that_never_comes_names_the_missing_ranks() -> None:
    """A lower rank that announced itself but never decided: the wait ends, naming who is absent."""
    for rank, among, missing in ((1, (0, 1), "none"), (2, None, "1")):
        store = dist.HashStore()
        store.set("rank-topology/recovery/0/alive/0", b"1")  # rank 0 announced, then died
        expected = rf"rank 0, the lowest .* within 0:00:00.2.* rank {rank} .*announced: {missing}\)"
        with fake_world(3, rank), pytest.raises(TopologyError, match=expected):
            recovery.agree_lost(generation=0, deadline=SHORT, store=store, among=among)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"generation": -1, "deadline": SHORT},
            r"generation must be a non-negative int, got -1 \(int\)",
        ),
        ({"generation": 0, "deadline": 5}, r"deadline must be a positive datetime.timedelta"),
        ({"generation": 0, "deadline": SHORT, "among": "01"}, r"among must be ranks .* '01'"),
        ({"generation": 0, "deadline": SHORT, "among": (0, 2)}, r"rank 1 is not among the exp"),
    ],
)
def test_agree_lost_refuses_bad_arguments(arguments: dict[str, object], message: str) -> None:
    """Every invalid argument of agree_lost raises one TopologyError naming it."""
    with fake_world(4, 1), pytest.raises(TopologyError, match=message):
        recovery.agree_lost(**arguments, store=dist.HashStore())  # type: ignore[arg-type]


def test_apply_refuses_what_it_cannot_apply() -> None:
    """Another layout, spare hosts, survivors out of order: refused before anything is consumed."""
    with fake_world(8, 1):
        groups = ProcessGroups.create(Topology(8, tp=2))
        plan = reshape(Topology(8, tp=4), lost_ranks=[5], gpus_per_node=1)
        with pytest.raises(TopologyError, match=r"starts from tp4.* but these groups realise"):
            recovery.apply(groups, plan, generation=0)
        with pytest.raises(TopologyError, match=r"result must be a topology.Reshape, got str"):
            recovery.apply(groups, "plan", generation=0)  # type: ignore[arg-type]
        spared = reshape(
            groups.topology, lost_ranks=[5], gpus_per_node=2, spares=[4], policy="spares"
        )
        with pytest.raises(TopologyError, match=r"brings in 1 spare host\(s\), which an in-proc"):
            recovery.apply(groups, spared, generation=0)
        dropped = reshape(groups.topology, lost_ranks=[5], gpus_per_node=2)
        swapped = attrs.evolve(dropped, mapping=(1, 0, *dropped.mapping[2:]))
        with pytest.raises(TopologyError, match=r"renumbers survivors out of their order"):
            recovery.apply(groups, swapped, generation=0)
        assert groups.group("tp") is not None  # still usable: nothing was consumed


def test_a_member_that_never_connects_leaves_the_old_groups_usable() -> None:
    """A new group torch cannot make (a member died meanwhile) is named; the old groups stay."""
    from topology_torch import _creation

    def dead(self: object, ranks: tuple[int, ...], channel: object) -> None:
        raise RuntimeError("wait timeout after 2000ms")  # torch's store wait, as with gloo

    with fake_world(16, 0):
        groups = ProcessGroups.create(Topology(16, tp=2, pp=2), timeout=timedelta(seconds=2))
        tp = groups.group("tp")
        plan = reshape(groups.topology, lost_ranks=[10], gpus_per_node=2)
        with (
            mock.patch.object(_creation.Registry, "new_local", dead),
            pytest.raises(TopologyError, match=r"new dp-cp group of torch ranks 0, 4, 6 was not"),
        ):
            recovery.apply(groups, plan, generation=0)
        assert groups.group("dp").size() == 4  # as it was
        again = recovery.apply(groups, plan, generation=1)
        assert again is not None and again.group("tp") is tp and again.group("dp").size() == 3
        again.destroy()


def test_a_generation_out_of_turn_raises_naming_both_and_ends_the_round_it_skipped() -> None:
    """Reused or skipped: this rank raises at once, and the round it should have entered ends
    as a conflict, so its ranks raise too instead of deciding this one lost."""
    store = dist.HashStore()
    with fake_world(2, 1):
        call = {"deadline": SHORT, "store": store, "among": (1,)}
        assert recovery.agree_lost(generation=0, **call) == ()  # type: ignore[arg-type]
        with pytest.raises(TopologyError, match=r"generation 0 was already used on rank 1, whose"):
            recovery.agree_lost(generation=0, **call)  # type: ignore[arg-type]
        with pytest.raises(TopologyError, match=r"generation 2 skips generations on rank 1, whos"):
            recovery.agree_lost(generation=2, **call)  # type: ignore[arg-type]
        with pytest.raises(TopologyError, match=r"generation 1 ended in a conflict: a rank call"):
            recovery.agree_lost(generation=1, **call)  # type: ignore[arg-type]
        assert recovery.agree_lost(generation=2, **call) == ()  # type: ignore[arg-type]


def test_ranks_calling_different_generations_all_raise() -> None:
    """Rank 0 calls generation 1 where 0 is due; rank 1 then calls 0: both raise, naming both
    generations (no split: rank 1 never decides rank 0 lost)."""
    store = dist.HashStore()
    with fake_world(2, 0), pytest.raises(TopologyError, match=r"generation 1 skips generations"):
        recovery.agree_lost(generation=1, deadline=SHORT, store=store)
    with (
        fake_world(2, 1),
        pytest.raises(TopologyError, match=r"generation 0 ended in a conflict: a rank called gen"),
    ):
        recovery.agree_lost(generation=0, deadline=SHORT, store=store)


def test_a_rank_behind_or_decided_lost_is_told_to_leave() -> None:
    """Rank 1 arrives after rank 0 decided it lost: TopologyError, leave; once rank 0 is in a
    later generation, rank 1's generation is behind it."""
    store = dist.HashStore()
    with fake_world(2, 0):
        assert recovery.agree_lost(generation=0, deadline=SHORT, store=store) == (1,)
    with fake_world(2, 1), pytest.raises(TopologyError, match=r"rank 1 arrived after generation"):
        recovery.agree_lost(generation=0, deadline=SHORT, store=store)
    other = dist.HashStore()
    with fake_world(2, 0):
        for generation in (0, 1):
            recovery.agree_lost(generation=generation, deadline=SHORT, store=other, among=(0,))
    with (
        fake_world(2, 1),
        pytest.raises(TopologyError, match=r"generation 0 is behind generation 1, which other"),
    ):
        recovery.agree_lost(generation=0, deadline=SHORT, store=other)


def test_with_groups_the_answer_is_in_the_layouts_ranks_after_an_apply() -> None:
    """Torch rank 0 of 16: after torch rank 10 is lost and applied, torch rank 5 is the new
    layout's rank 3, and agree_lost(groups) answers 3; without groups it is refused."""
    store = dist.HashStore()
    with fake_world(16, 0):
        groups = ProcessGroups.create(Topology(16, tp=2, pp=2))
        for rank in set(range(1, 16)) - {10}:  # the others announced themselves
            store.set(f"rank-topology/recovery/0/alive/{rank}", b"1")
        lost = recovery.agree_lost(groups, generation=0, deadline=SHORT, store=store)
        assert lost == (10,)
        plan = reshape(groups.topology, lost_ranks=lost, gpus_per_node=2)
        renewed = recovery.apply(groups, plan, generation=0)
        assert renewed is not None and renewed.topology.world_size == 12
        survivors = [t for t, n in enumerate(plan.mapping) if n is not None]
        for new, torch_rank in enumerate(survivors):
            if torch_rank not in (0, 5):
                store.set(f"rank-topology/recovery/1/alive/{new}", b"1")
        with pytest.raises(TopologyError, match=r"generation 0 decided lost ranks, after which"):
            recovery.agree_lost(generation=1, deadline=SHORT, store=store)
        again = recovery.agree_lost(renewed, generation=1, deadline=SHORT, store=store)
        assert again == (survivors.index(5),) == (3,)
        assert reshape(renewed.topology, lost_ranks=again, gpus_per_node=2).new.dp == 2
        renewed.destroy()


def test_agree_lost_refuses_a_bad_store_and_meets_without_a_default_group() -> None:
    """A store that is no torch Store is a TopologyError; with groups and store= no default
    group is asked for (torch's is_initialized says no, get_rank would fail)."""
    with fake_world(4, 1):
        with pytest.raises(TopologyError, match=r"store must be a torch.distributed.Store .*dict"):
            recovery.agree_lost(generation=0, deadline=SHORT, store={})
        with pytest.raises(TopologyError, match=r"groups must be the ProcessGroups .* got str"):
            recovery.agree_lost("groups", generation=0, deadline=SHORT)  # type: ignore[arg-type]
        groups = ProcessGroups.create(Topology(4, tp=2))
        with pytest.raises(TopologyError, match=r"among and groups were both given"):
            recovery.agree_lost(groups, generation=0, deadline=SHORT, among=(1,))
        store = dist.HashStore()
        for rank in (0, 2, 3):
            store.set(f"rank-topology/recovery/0/alive/{rank}", b"1")
        store.set("rank-topology/recovery/0/decided", '{"lost": []}')
        gone = mock.Mock(side_effect=AssertionError("the default group was asked for"))
        with (
            mock.patch.object(dist, "is_initialized", return_value=False),
            mock.patch.object(dist, "get_rank", gone),
            mock.patch.object(dist, "get_world_size", gone),
        ):
            assert recovery.agree_lost(groups, generation=0, deadline=SHORT, store=store) == ()
            with pytest.raises(TopologyError, match=r"without groups numbers ranks by torch's"):
                recovery.agree_lost(generation=1, deadline=SHORT, store=store)
            with pytest.raises(TopologyError, match=r"not initialized and no store was given"):
                recovery.agree_lost(groups, generation=1, deadline=SHORT)


def _grow_checks(rank: int, world_size: int, wrong: int) -> None:
    """Survivors of a dp 2 job; with ``joining`` processes (:func:`_grow_joiner`) that give
    tensors of the wrong shape when ``wrong``: every rank raises the same TopologyError."""
    groups = ProcessGroups.create(Topology(2))
    plan = grow(groups.topology, Topology(4))
    store = dist.distributed_c10d._get_default_store().underlying_store
    if rank == 0:
        store.set(JOIN, "1")  # run_world starts the joining processes
    with pytest.raises(
        TopologyError, match=r"ranks? .* refused recovery.grow, so no rank"
    ) as error:
        recovery.grow(groups, plan, _tensors(3), generation=0, store=store, backend="gloo")
    assert "dense tensor 0 of new rank 2 is [4] torch.float32 but its source, new rank" in str(
        error.value
    )


def _grow_joiner(index: int, store: object, wrong: int) -> None:
    plan = grow(Topology(2), Topology(4))
    with pytest.raises(TopologyError, match=r"refused recovery.grow"):
        recovery.grow(None, plan, _tensors(wrong), generation=0, store=store, backend="gloo")


def _tensors(size: int) -> dict[str, list[torch.Tensor]]:
    return {"dense": [torch.zeros(size)], "expert": []}


def test_tensors_shaped_unlike_their_source_make_every_rank_raise_before_anything_moves() -> None:
    """2 survivors and 2 new processes, whose tensors have 4 elements where the holders' have
    3: every process raises the same TopologyError naming the tensor and both ranks."""
    run_world(2, _grow_checks, 4, store="agent", joining=2, join=_grow_joiner)


def test_grow_refuses_misuse_before_anything_is_consumed() -> None:
    """Another plan, layout, tensors, store; a joining process with a default group; more
    joining processes than the plan's: a TopologyError on this rank, its groups intact."""
    plan = grow(Topology(4, tp=2), Topology(8, tp=2))
    call = {"generation": 0, "store": dist.HashStore(), "backend": "gloo"}
    tensors = _tensors(3)
    with fake_world(4, 1):
        groups = ProcessGroups.create(Topology(4, tp=2))
        cases = [
            (groups, "plan", tensors, r"plan must be a topology.Growth, got str"),
            (groups, grow(Topology(4), Topology(8)), tensors, r"starts from tp1.*dp4.* but these"),
            (groups, plan, [], r"tensors must map each part \(dense, expert\) to this rank's"),
            (groups, plan, {"dense": []}, r"names the parts \['dense'\] but this growth moves"),
            (groups, plan, {"dense": torch.zeros(2), "expert": []}, r"\['dense'\] must be a li"),
            (groups, plan, {"dense": [1], "expert": []}, r"\['dense'\]\[0\] must be a torch.Ten"),
            (None, plan, tensors, r"groups is None but this process has a default group"),
        ]
        for mine, growth, given, message in cases:
            with pytest.raises(TopologyError, match=message):
                recovery.grow(mine, growth, given, **call)  # type: ignore[arg-type]
        with pytest.raises(TopologyError, match=r"store must be a torch.distributed.Store"):
            recovery.grow(groups, plan, tensors, generation=0, store={}, backend="gloo")
        crossed = attrs.evolve(plan, pulls=(*plan.pulls, attrs.evolve(plan.pulls[0], rank=0)))
        with pytest.raises(TopologyError, match=r"new rank 0 both sends and receives its dense"):
            recovery.grow(groups, crossed, tensors, **call)  # type: ignore[arg-type]
        assert groups.group("tp") is not None  # nothing consumed
    store = dist.HashStore()
    store.set("rank-topology/grow/0/joined", "4")  # the plan's 4 joining ranks are taken
    with pytest.raises(TopologyError, match=r"joining process 5 but the growth has 4 joining"):
        recovery.grow(None, plan, tensors, generation=0, store=store, backend="gloo")
