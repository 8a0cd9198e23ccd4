"""The spawn helper itself: a real gloo world sums every rank."""

from __future__ import annotations

import os
import signal

import pytest
import torch
import torch.distributed as dist

from tests.torch.world import run_world


def _sum_ranks(rank: int, world_size: int) -> None:
    value = torch.tensor([float(rank)])
    dist.all_reduce(value)
    assert value.item() == sum(range(world_size)), value


def _fail_on_rank_one(rank: int, world_size: int) -> None:
    if rank == 1:
        raise RuntimeError("boom on purpose")


def _kill_rank_one(rank: int, world_size: int) -> None:
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)


def test_all_reduce_sums_every_rank() -> None:
    """An all-reduce over a spawned world of 4 sums 0 + 1 + 2 + 3."""
    run_world(4, _sum_ranks)


def test_a_failing_rank_fails_the_test() -> None:
    """A rank that raises makes run_world raise with that rank's traceback."""
    with pytest.raises(AssertionError, match="boom on purpose"):
        run_world(2, _fail_on_rank_one)


def test_a_rank_killed_but_not_listed_fails_the_test() -> None:
    """Only the ranks in ``killed`` may die of SIGKILL (``test_recovery`` lists its victim)."""
    with pytest.raises(AssertionError, match=r"exited with codes \{1: -9\}"):
        run_world(2, _kill_rank_one, store="tcp")
