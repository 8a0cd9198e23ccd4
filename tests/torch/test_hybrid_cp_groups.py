"""Hybrid (dynamic) context parallelism on a real 8-rank gloo world, all checks in one world.

The façade's ``initialize_model_parallel(hybrid_context_parallel=True)``: each size's group is
``topology.hybrid_cp_groups``' block holding the rank, made on first get (one ``new_group`` per
size and rank) or in ``initialize_model_parallel`` with ``hybrid_groups="eager"``; a collective
on each group sums its members; Megatron's getter semantics (the dp-cp group at size dp * cp, a
``KeyError`` for other sizes); the dynamic spelling; teardown releases Megatron's NCCL EP
context while the groups are alive and destroys the hybrid groups. (Megatron's own getter on
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

from topology import Topology, hybrid_cp_groups
from topology_torch.compat import megatron as mpu
from topology_torch.compat.megatron import _hybrid

from .world import run_world

WORLD = 8
SIZES = (2, 4)  # dp * cp = 8 (cp 2, dp 4): blocks of 2 and 4, the dp-cp group is size 8
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


def _expected(rank: int) -> dict[int, tuple[int, ...]]:
    blocks = hybrid_cp_groups(Topology(WORLD, cp=2))
    return {size: tuple(blocks[size].ranks_of(rank) or ()) for size in SIZES}


def _facade(rank: int, get: Callable[..., Any], eager: bool) -> None:
    """One initialize/destroy cycle of the façade, lazy or eager."""
    expected = _expected(rank)
    with counting() as calls:
        mpu.initialize_model_parallel(
            context_parallel_size=2,
            hybrid_context_parallel=not eager,
            dynamic_context_parallel=eager,
            hybrid_groups="eager" if eager else "lazy",
        )
        at_initialize = sum(c.startswith("topology:hybrid") for c in calls)
        made = _hybrid.current()
        assert made is not None
        assert at_initialize == (len(SIZES) if eager else 0) == made.calls
        for size in SIZES:
            group = get(group_size=size)
            assert tuple(_members(group)) == expected[size], size
            assert _summed(rank, group) == sum(expected[size])
            assert get(group_size=size) is group  # made once
            assert mpu._HYBRID_DP_CP_GROUPS[size] is group
        assert made.calls == len(SIZES) == sum(c.startswith("topology:hybrid") for c in calls)
    assert get(group_size=WORLD) is mpu.get_data_parallel_group(with_context_parallel=True)
    for size in (1, 3, 16):
        with pytest.raises(KeyError, match=f"size {size} do not exist; the sizes are 2, 4"):
            get(group_size=size)
    ep: list[bool] = []
    dp_cp = mpu.get_data_parallel_group(with_context_parallel=True)
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
    with pytest.raises(AssertionError, match="not initialized"):
        get(group_size=2)


def _hybrid_world(rank: int, world_size: int) -> None:
    _facade(rank, mpu.get_hybrid_data_context_parallel_groups, eager=False)
    _facade(rank, mpu.get_dynamic_data_context_parallel_groups, eager=True)


def test_hybrid_groups_on_a_gloo_world() -> None:
    """Lazy and eager hybrid groups, the getters and teardown, on 8 gloo ranks."""
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
        _hybrid.make(blocks, strategy, None, eager=False)
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
