"""The world helper itself: a gloo world sums every rank; ranks see the caller's environment."""

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


def _sees(rank: int, world_size: int, expected: dict[str, str | None]) -> None:
    assert {name: os.environ.get(name) for name in expected} == expected


def test_ranks_see_the_environment_of_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranks see the caller's environment at each call, as spawned ones do (the server that
    forks them was started earlier, by the first call)."""
    monkeypatch.setenv("TOPOLOGY_TEST_WORLD", "first")
    monkeypatch.setenv("TOPOLOGY_TEST_WORLD_GONE", "1")
    run_world(2, _sees, {"TOPOLOGY_TEST_WORLD": "first", "TOPOLOGY_TEST_WORLD_GONE": "1"})
    monkeypatch.setenv("TOPOLOGY_TEST_WORLD", "second")
    monkeypatch.delenv("TOPOLOGY_TEST_WORLD_GONE")
    run_world(2, _sees, {"TOPOLOGY_TEST_WORLD": "second", "TOPOLOGY_TEST_WORLD_GONE": None})


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
