"""Issue 25: a 16-rank gloo job loses a rank, agrees, applies the reshape and trains on."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import timedelta
from unittest import mock

import attrs
import pytest
import torch.distributed as dist

from tests.torch import recovery_run
from tests.torch.world import fake_world, run_world
from topology import Topology, TopologyError, reshape
from topology_torch import ProcessGroups, recovery

SHORT = timedelta(milliseconds=200)


def test_the_survivors_train_on_as_a_fresh_dp3_run_would() -> None:
    """After rank 10 dies, losses and weights equal a fresh dp-3 run from the same weights."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "times.json")
        run_world(16, recovery_run.run, out, killed=(recovery_run.VICTIM,), store="tcp")
        with open(out) as file:
            times = json.load(file)
    assert len(times["losses"]) == recovery_run.STEPS
    assert times["killed"] < times["agreed"] < times["first step"]


def test_the_lowest_survivor_decides_that_the_silent_ranks_are_lost() -> None:
    """Rank 1 of 2, alone on the store, decides after its deadline that rank 0 is lost."""
    with fake_world(2, 1):
        assert recovery.agree_lost(generation=0, deadline=SHORT, store=dist.HashStore()) == (0,)


def test_a_decision_that_never_comes_names_the_missing_ranks() -> None:
    """A lower rank that announced itself but never decided: the wait ends, naming who is absent."""
    for rank, among, missing in ((1, (0, 1), "none"), (2, None, "1")):
        store = dist.HashStore()
        store.set("rank-topology/recovery/3/alive/0", b"1")  # rank 0 announced, then died
        expected = rf"rank 0, the lowest .* within 0:00:00.2.* rank {rank} .*announced: {missing}\)"
        with fake_world(3, rank), pytest.raises(TopologyError, match=expected):
            recovery.agree_lost(generation=3, deadline=SHORT, store=store, among=among)


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
