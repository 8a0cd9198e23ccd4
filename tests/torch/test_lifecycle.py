"""The process-group lifecycle on real gloo worlds: no race, no hang, every rank hears errors."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from tests.torch.world import run_world
from topology import Topology, TopologyError
from topology_torch import ProcessGroups
from topology_torch.compat import megatron

CYCLES = 50


def _megatron_cycles(rank: int, world_size: int) -> None:
    for cycle in range(CYCLES):
        megatron.initialize_model_parallel(1, 4)  # pp, dp and embedding groups overlap
        if cycle % 10 == 0:  # now and then, the groups carry data between create and destroy
            value = torch.ones(1)
            dist.all_reduce(value, group=megatron.get_model_parallel_group())
            assert value.item() == 4, (cycle, value.item())
        megatron.destroy_model_parallel()


def test_fifty_megatron_create_destroy_cycles_on_eight_ranks_never_break() -> None:
    """initialize_model_parallel / destroy_model_parallel 50 times on 8 gloo ranks."""
    run_world(8, _megatron_cycles, timeout=900)


def _slow_member(rank: int, world_size: int) -> None:
    store = c10d._get_default_store()
    original = dist.new_group

    def slow_new_group(*args: Any, **kwargs: Any) -> Any:
        group = original(*args, **kwargs)
        time.sleep(2)  # rank 1 finishes its groups long after its peers have theirs
        store.set(f"made/{dist.get_rank()}/{len(made)}", "1")
        made.append(group)
        return group

    made: list[Any] = []
    if rank == 1:
        dist.new_group = slow_new_group
    try:
        groups = ProcessGroups.create(Topology(world_size, tp=2), kinds=("tp", "dp"))
    finally:
        dist.new_group = original
    if rank == 1:
        assert len(made) == 2  # tp (0, 1) and dp (1, 3)
    # whoever returns from create, rank 1 has made both of its groups by then
    assert store.check(["made/1/0", "made/1/1"]), rank
    groups.destroy()


def test_create_returns_only_after_every_rank_has_made_its_groups() -> None:
    """A member slow to finish new_group is waited for: create never returns before it."""
    run_world(4, _slow_member)


def _one_rank_invalid(rank: int, world_size: int) -> None:
    kinds = ("tp", "xp") if rank == 2 else ("tp", "dp")
    with pytest.raises(
        TopologyError,
        match=(
            r"^rank 2 of 4 refused ProcessGroups.create, so no rank created anything: "
            r"rank 2: kinds names unknown kind 'xp'; valid kinds: dp-cp, dp, "
        ),
    ):
        ProcessGroups.create(Topology(world_size, tp=2), kinds=kinds)
    # every rank is still in step: the next create meets and works
    with ProcessGroups.create(Topology(world_size, tp=2)) as groups:
        value = torch.tensor([float(2**rank)])
        dist.all_reduce(value, group=groups.group("tp"))
        assert value.item() == sum(2.0**r for r in groups.ranks("tp"))


def test_an_argument_invalid_on_one_rank_raises_on_every_rank_naming_it() -> None:
    """Rank 2 alone names an unknown kind: all four ranks raise, naming rank 2 and the kind."""
    run_world(4, _one_rank_invalid)


def _facade_invalid_on_one_rank(rank: int, world_size: int) -> None:
    with pytest.raises(
        TopologyError,
        match=r"^rank 1 of 4 refused ProcessGroups.create, so no rank created anything: rank 1: "
        r"world_size \(4\) is not divisible by tp\(3\)",  # Megatron's wording since the drop-in
    ):
        megatron.initialize_model_parallel(3 if rank == 1 else 2)
    assert not megatron.is_initialized()


def test_a_facade_argument_invalid_on_one_rank_raises_on_every_rank() -> None:
    """Megatron's façade with tp=3 on rank 1 only: all ranks raise at once, naming rank 1."""
    run_world(4, _facade_invalid_on_one_rank)


def _absent_rank(rank: int, world_size: int, through_env: bool) -> None:
    if rank == 3:
        return  # never calls create
    if through_env:
        os.environ["TOPOLOGY_TORCH_ARRIVAL_TIMEOUT"] = "1.5"
        wait, shown = None, r"0:00:01\.500000"
    else:
        wait, shown = timedelta(seconds=2), "0:00:02"
    with pytest.raises(
        TopologyError, match=rf"^rank 3 of 4 did not reach ProcessGroups.create within {shown} "
    ):
        ProcessGroups.create(Topology(world_size, tp=2), arrival_timeout=wait)


@pytest.mark.parametrize("through_env", [False, True], ids=["argument", "environment"])
def test_a_rank_that_never_calls_create_is_named_after_the_arrival_deadline(
    through_env: bool,
) -> None:
    """Rank 3 skips create: the others raise naming it once the (short) deadline passes."""
    run_world(4, _absent_rank, through_env)


def _differ(rank: int, world_size: int, field: str) -> None:
    topo = Topology(world_size, tp=2)
    kwargs: dict[str, Any]
    if field == "kinds":
        kwargs = {"kinds": ("tp", "pp") if rank == 1 else ("tp",)}
        shown = r"rank 1 has kinds \('tp', 'pp'\) but rank 0 has \('tp',\)"
    else:
        seconds = 30 if rank == 1 else 60
        kwargs = {"kinds": ("tp",), "timeout": {"tp": timedelta(seconds=seconds)}}
        shown = r"rank 1 has timeout for tp 0:00:30 but rank 0 has 0:01:00"
    with pytest.raises(
        TopologyError,
        match=rf"^rank 1 called ProcessGroups.create with different arguments than rank 0: "
        rf"{shown}; call",
    ):
        ProcessGroups.create(topo, **kwargs)


@pytest.mark.parametrize("field", ["kinds", "timeout"])
def test_ranks_differing_only_in_kinds_or_timeouts_are_told_what_differs(field: str) -> None:
    """The agreement error quotes both ranks' kinds, or both timeouts of the kind."""
    run_world(4, _differ, field)
