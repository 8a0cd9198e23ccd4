"""Hybrid (dynamic) context parallelism on a real 8-rank gloo world, all checks in one world.

The façade's ``initialize_model_parallel(hybrid_context_parallel=True)``: each size's group is
``topology.hybrid_cp_groups``' block holding the rank, made on first get (one ``new_group`` per
size and rank) or in ``initialize_model_parallel`` with ``hybrid_groups="eager"``; a collective
on each group sums its members; Megatron's getter semantics (the dp-cp group at size dp * cp, a
``KeyError`` for other sizes); the dynamic spelling with Megatron dev's sizes (one-rank groups
at ``min_dynamic_context_parallel_size=1``, none below a larger minimum); teardown releases
Megatron's NCCL EP context while the groups are alive and destroys the hybrid groups (torch
knows none of them after it). (Megatron's own getter on
our groups after ``install()``, beside Megatron's own groups, is checked on a fake world in
``test_megatron_install.py``; the collective strategies below, on a fake world too.)
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

pytest.importorskip("torch.distributed")

import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from topology import Topology, TopologyError, hybrid_cp_groups
from topology_torch.compat import megatron as mpu
from topology_torch.compat.megatron import _hybrid

from .world import run_world

WORLD = 8
SIZES = (2, 4)  # dp * cp = 8 (cp 2, dp 4): blocks of 2 and 4, the dp-cp group is size 8
# the cycles of the gloo world: getter, hybrid_groups, the sizes made, initialize's keywords
CYCLES: tuple[tuple[str, str, tuple[int, ...], dict[str, Any]], ...] = (
    ("hybrid", "lazy", SIZES, {"hybrid_context_parallel": True}),
    ("dynamic", "eager", (1, *SIZES), {"dynamic_context_parallel": True}),  # dev: from size 1
    (
        "dynamic",
        "lazy",
        (4,),
        {"dynamic_context_parallel": True, "min_dynamic_context_parallel_size": 4},
    ),
)
EP = "megatron.core.transformer.moe.fused_a2a"


@contextmanager
def counting() -> Iterator[list[str]]:
    """The ``group_desc`` of every ``new_group`` call in the block."""
    calls: list[str] = []
    original = dist.new_group

    def new_group(*args: Any, **kwargs: Any) -> Any:
        calls.append(str(kwargs.get("group_desc")))
        return original(*args, **kwargs)

    dist.new_group = new_group
    try:
        yield calls
    finally:
        dist.new_group = original


def _members(group: Any) -> list[int]:
    return dist.get_process_group_ranks(group)


def _summed(rank: int, group: Any) -> int:
    value = torch.tensor([rank])
    dist.all_reduce(value, group=group)
    return int(value.item())


def _expected(rank: int, sizes: tuple[int, ...]) -> dict[int, tuple[int, ...]]:
    blocks = hybrid_cp_groups(Topology(WORLD, cp=2), min_size=1)
    return {size: tuple(blocks[size].ranks_of(rank) or ()) for size in sizes}


def _facade(
    rank: int, get: Callable[..., Any], when: str, sizes: tuple[int, ...], keywords: dict[str, Any]
) -> None:
    """One initialize/destroy cycle of the façade, lazy or eager."""
    expected = _expected(rank, sizes)
    with counting() as calls:
        mpu.initialize_model_parallel(context_parallel_size=2, hybrid_groups=when, **keywords)
        at_initialize = sum(c.startswith("topology:hybrid") for c in calls)
        made = _hybrid.current()
        assert made is not None and made.sizes == sizes
        assert at_initialize == (len(sizes) if when == "eager" else 0) == made.calls
        for size in sizes:
            group = get(group_size=size)
            assert tuple(_members(group)) == expected[size], size
            assert _summed(rank, group) == sum(expected[size])
            assert get(group_size=size) is group  # made once
            assert mpu._HYBRID_DP_CP_GROUPS[size] is group
        assert made.calls == len(sizes) == sum(c.startswith("topology:hybrid") for c in calls)
    assert get(group_size=WORLD) is mpu.get_data_parallel_group(with_context_parallel=True)
    listed = ", ".join(map(str, sizes))
    for size in sorted({1, 2, 3, 16} - set(sizes)):
        with pytest.raises(KeyError, match=f"size {size} do not exist; the sizes are {listed} "):
            get(group_size=size)
    ep: list[bool] = []
    dp_cp = mpu.get_data_parallel_group(with_context_parallel=True)
    hybrid = list(made.values())
    finalize = types.ModuleType(EP)
    finalize.nccl_ep_finalize = lambda: ep.append(  # type: ignore[attr-defined]
        dp_cp in dist.distributed_c10d._world.pg_map
    )
    sys.modules[EP] = finalize
    try:
        mpu.destroy_model_parallel()
    finally:
        del sys.modules[EP]
    assert ep == [True]  # released first, while the groups were alive
    assert _hybrid.current() is None and mpu._HYBRID_DP_CP_GROUPS == {}
    assert not [g for g in hybrid if g in dist.distributed_c10d._world.pg_map]  # destroyed
    with pytest.raises(AssertionError, match="not initialized"):
        get(group_size=2)


def _hybrid_world(rank: int, world_size: int) -> None:
    for spelling, when, sizes, keywords in CYCLES:
        get = getattr(mpu, f"get_{spelling}_data_context_parallel_groups")
        _facade(rank, get, when, sizes, keywords)


def test_hybrid_groups_on_a_gloo_world() -> None:
    """Lazy and eager hybrid groups, Megatron dev's sizes, the getters and teardown, on 8 gloo
    ranks."""
    run_world(WORLD, _hybrid_world, timeout=300)


# -- the collective strategies, in this process on a fake world of 64 -----------------------------


@pytest.mark.parametrize("strategy", ["split", "all"])
def test_collective_strategies_make_every_size_at_once(
    strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``split`` (an NCCL default group bound to a device; stood in for here) makes one
    ``split_group`` per size of the core's blocks, ``all`` enters every block as Megatron does;
    both at initialize time, even when lazy was asked for."""
    split: list[list[list[int]]] = []

    def split_group(split_ranks: list[list[int]], **_: Any) -> object:
        split.append(split_ranks)
        return object()  # a stand-in communicator

    monkeypatch.setattr(dist, "split_group", split_group)
    blocks = hybrid_cp_groups(Topology(64, tp=2, cp=2))  # dp * cp = 32: sizes 2, 4, 8, 16
    dist.init_process_group("fake", store=FakeStore(), rank=5, world_size=64)
    try:
        _hybrid.make(blocks, strategy, None, eager=False, whole=None)
        made = _hybrid.current()
        assert made is not None and sorted(made) == [2, 4, 8, 16]
        if strategy == "split":
            assert made.calls == 4 and split == [[list(b) for b in blocks[s]] for s in made.sizes]
        else:
            assert made.calls == sum(len(blocks[s]) for s in made.sizes) == 2 * (16 + 8 + 4 + 2)
            assert _members(made[4]) == [1, 3, 5, 7]
        _hybrid.release_all()
        assert _hybrid.current() is None and len(made) == 0
    finally:
        _hybrid.release_all()
        dist.destroy_process_group()


def test_eager_groups_are_warmed_up_size_1_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """``hybrid_groups="eager"`` warms this rank's groups up, ascending, then the dp-cp group,
    leaving out the one-rank groups (Megatron PR #6479: ``if group_size == 1: continue``); lazy
    groups are not warmed up."""
    warmed: list[list[Any]] = []
    monkeypatch.setattr(_hybrid, "warm_up", warmed.append)
    blocks = hybrid_cp_groups(Topology(64, tp=2, cp=2), min_size=1)  # sizes 1, 2, 4, 8, 16
    whole = object()  # the dp-cp group
    dist.init_process_group("fake", store=FakeStore(), rank=5, world_size=64)
    try:
        for eager in (False, True):
            _hybrid.make(blocks, "local", None, eager=eager, whole=whole)
            made = _hybrid.current()
            assert made is not None and made.sizes == (1, 2, 4, 8, 16)
            assert made.calls == (5 if eager else 0)
            if eager:
                assert warmed == [[*(made[s] for s in (2, 4, 8, 16)), whole]]
            else:
                assert warmed == []
        _hybrid.release_all()
    finally:
        _hybrid.release_all()
        dist.destroy_process_group()


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
def test_warm_up_is_a_barrier_on_nccl_only(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On NCCL each group gets Megatron's barrier on this rank's device, then a synchronize;
    gloo groups connect when made and get none."""
    done: list[tuple[str, object, object]] = []
    monkeypatch.setattr(dist, "get_backend", lambda *_: backend)
    monkeypatch.setattr(
        dist, "barrier", lambda group, device_ids: done.append(("barrier", group, device_ids))
    )
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: done.append(("sync", None, None)))
    _hybrid.warm_up(["g2", "dp-cp"])
    expected = [("barrier", "g2", [3]), ("sync", None, None), ("barrier", "dp-cp", [3])]
    assert done == ([*expected, ("sync", None, None)] if backend == "nccl" else [])


def test_the_minimum_size_is_checked_and_read_by_both_spellings() -> None:
    """min_dynamic_context_parallel_size must be a positive int (Megatron dev's config) and at
    most dp * cp (its arguments' assert); the hybrid spelling starts at 2 or that minimum."""
    dist.init_process_group("fake", store=FakeStore(), rank=5, world_size=WORLD)
    try:
        with pytest.raises(TopologyError, match="min_dynamic_context_parallel_size must be a"):
            mpu.initialize_model_parallel(
                context_parallel_size=2,
                dynamic_context_parallel=True,
                min_dynamic_context_parallel_size=0,
            )
        with pytest.raises(AssertionError, match=r"min_size\(16\) is above dp\(4\) \* cp\(2\) = 8"):
            mpu.initialize_model_parallel(
                context_parallel_size=2,
                dynamic_context_parallel=True,
                min_dynamic_context_parallel_size=16,
            )
        for minimum, sizes in ((1, SIZES), (4, (4,))):
            mpu.initialize_model_parallel(
                context_parallel_size=2,
                hybrid_context_parallel=True,
                min_dynamic_context_parallel_size=minimum,
            )
            made = _hybrid.current()
            assert made is not None and made.sizes == sizes
            mpu.destroy_model_parallel()
    finally:
        if mpu.model_parallel_is_initialized():
            mpu.destroy_model_parallel()
        dist.destroy_process_group()
