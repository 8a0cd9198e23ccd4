"""Debug checks of ``topology_torch.ops``: ranks that disagree get a TopologyError on every rank.

Each world gives one rank a different shape, dtype, dim, op or op call; with the switch on every
rank must raise the same message naming that rank and both descriptions, and the group must stay
usable afterwards. With the switch off no extra collective runs.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.distributed as dist

from tests.torch.test_layers import counting
from tests.torch.world import run_world
from topology import TopologyError
from topology_torch import ops

MAX = dist.ReduceOp.MAX


def expect_everywhere(call: Callable[[], Any], match: str, group: Any) -> None:
    """``call`` raises TopologyError matching ``match`` here; afterwards the group still works."""
    with pytest.raises(TopologyError, match=match):
        call()
    probe = torch.ones(1)
    dist.all_reduce(probe, group=group)
    assert probe.item() == dist.get_world_size(group)


def shape_cases(rank: int, n: int, group: Any) -> list[tuple[Callable[[], Any], str]]:
    """Calls where the last rank's tensor differs, with the message every rank must raise.

    With n = 2 the ranks tie and rank 0's record is the reference; with n = 4 it is the majority.
    """
    odd = n - 1
    x = torch.ones(2, 3 if rank == odd else 4)
    wide = torch.ones(2, 4 * n, dtype=torch.float64 if rank == odd else torch.float32)
    mine = f"rank {odd} has shape"
    first = torch.ones(2, 5 if rank == 0 else 4)
    by_majority = (  # four ranks: rank 0 is the odd one out; two ranks: rank 0 is the reference
        r"rank 0 has shape \(2, 5\) float32 but rank 1 has \(2, 4\) float32"
        if n > 2
        else r"rank 1 has shape \(2, 4\) float32 but rank 0 has \(2, 5\) float32"
    )
    return [
        (lambda: ops.mp_reduce(first, group=group), rf"mp_reduce: {by_majority}"),
        (
            lambda: ops.mp_gather(x, dim=0, group=group),
            rf"mp_gather: {mine} \(2, 3\) float32 but rank 0 has ",
        ),
        (
            lambda: ops.mp_reduce(x, group=group),
            rf"mp_reduce: {mine} \(2, 3\) float32 but rank 0 has \(2, 4\)",
        ),
        (
            lambda: ops.mp_copy(x, group=group),
            rf"mp_copy: {mine} \(2, 3\) float32 but rank 0 has \(2, 4\)",
        ),
        (
            lambda: ops.sp_gather(x, dim=0, group=group),
            rf"sp_gather: {mine} \(2, 3\) float32 but rank 0",
        ),
        (
            lambda: ops.mp_scatter(wide, group=group),
            rf"mp_scatter: {mine} \(2, {4 * n}\) float64 but rank 0 has \(2, {4 * n}\) float32",
        ),
        (
            lambda: ops.sp_scatter(wide, dim=1, group=group),
            rf"sp_scatter: {mine} \(2, {4 * n}\) float64 but rank 0 has \(2, {4 * n}\) float32",
        ),
    ]


def check_shapes(rank: int, n: int, group: Any) -> None:
    """Different shapes or dtypes: every rank raises naming the odd rank and both shapes."""
    for call, match in shape_cases(rank, n, group):
        expect_everywhere(call, match, group)


def check_arguments(rank: int, n: int, group: Any) -> None:
    """Different dims, ops, or different ops called at once: named on every rank."""
    x = torch.ones(4, 4)
    last = rank == n - 1
    expect_everywhere(
        lambda: ops.mp_gather(x, dim=1 if last else 0, group=group),
        rf"mp_gather: rank {n - 1} passes dim 1 but rank 0 passes dim 0",
        group,
    )
    expect_everywhere(
        lambda: ops.mp_reduce(x, op=MAX if last else ops.SUM, group=group),
        rf"mp_reduce: rank {n - 1} reduces with MAX but rank 0 with SUM",
        group,
    )
    expect_everywhere(
        lambda: (ops.mp_reduce if last else ops.mp_gather)(x, group=group),
        rf"rank {n - 1} is in mp_reduce but rank 0 is in mp_gather",
        group,
    )


def check_backward(rank: int, n: int, group: Any) -> None:
    """A gradient whose shape differs on one rank is caught in mp_copy's backward."""
    x = torch.ones(3, 3 if rank == n - 1 else 4, requires_grad=True)
    with ops.debug_checks(False):  # let the forward through: it has no collective
        y = ops.mp_copy(x, group=group)
    with ops.debug_checks():
        expect_everywhere(
            lambda: y.sum().backward(),
            rf"mp_copy backward: rank {n - 1} has shape \(3, 3\) float32 but rank 0 has \(3, 4\)",
            group,
        )


def check_agree_before_validating(rank: int, n: int, group: Any) -> None:
    """A size indivisible on one rank only is the agreement error everywhere, not a hang."""
    x = torch.ones(2, 4 * n + (1 if rank == n - 1 else 0))
    expect_everywhere(
        lambda: ops.mp_scatter(x, group=group),
        rf"mp_scatter: rank {n - 1} has shape \(2, {4 * n + 1}\) float32",
        group,
    )


def check_env_switch(rank: int, n: int, group: Any) -> None:
    """TOPOLOGY_TORCH_DEBUG=1 turns the checks on; debug_checks(False) overrides it."""
    x = torch.ones(2, 3 if rank == n - 1 else 4)
    os.environ[ops.DEBUG_ENV] = "1"
    try:
        assert ops.debug_checks_enabled()
        expect_everywhere(lambda: ops.mp_gather(x, dim=0, group=group), "has shape", group)
        with ops.debug_checks(False), counting() as counts:
            ops.mp_gather(torch.ones(2, 4), dim=0, group=group)
        assert sum(counts.values()) == 1, counts
    finally:
        del os.environ[ops.DEBUG_ENV]


def check_switch_costs(rank: int, n: int, group: Any) -> None:
    """Off: each op runs only its own collective; on: one extra small all-gather per op."""
    x = torch.ones(4, 4 * n)
    calls = (
        lambda: ops.mp_gather(x, group=group),
        lambda: ops.mp_reduce(x, group=group),
        lambda: ops.sp_scatter(x, dim=1, group=group),
    )
    for call in calls:
        with counting() as off:
            call()
        with ops.debug_checks(), counting() as on:
            call()
        assert sum(off.values()) == 1, off
        assert sum(on.values()) == 2, on
    for call in (lambda: ops.mp_copy(x, group=group), lambda: ops.mp_scatter(x, group=group)):
        with counting() as off:
            call()
        assert off == Counter(), off


def _world(rank: int, n: int) -> None:
    group = dist.new_group(list(range(n)))
    with ops.debug_checks():
        check_shapes(rank, n, group)
        check_arguments(rank, n, group)
        check_agree_before_validating(rank, n, group)
    check_backward(rank, n, group)
    check_env_switch(rank, n, group)
    check_switch_costs(rank, n, group)


@pytest.mark.parametrize("n", [2, 4])
def test_debug_checks_name_the_rank_that_differs(n: int) -> None:
    """With debug checks on, a rank that differs is named on every rank by a TopologyError."""
    run_world(n, _world)


def test_debug_switch_rejects_unknown_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """TOPOLOGY_TORCH_DEBUG must be a 0/1 switch; anything else raises TopologyError."""
    monkeypatch.setenv(ops.DEBUG_ENV, "maybe")
    with pytest.raises(TopologyError, match=r"TOPOLOGY_TORCH_DEBUG\('maybe'\) is not a switch"):
        ops.debug_checks_enabled()
    monkeypatch.setenv(ops.DEBUG_ENV, "0")
    assert not ops.debug_checks_enabled()


def test_debug_checks_nest_and_restore() -> None:
    """debug_checks blocks nest; leaving one restores the outer setting."""
    with ops.debug_checks():
        with ops.debug_checks(False):
            assert not ops.debug_checks_enabled()
        assert ops.debug_checks_enabled()
    with (
        pytest.raises(TopologyError, match=r"enabled\('yes'\) must be True or False"),
        ops.debug_checks("yes"),  # type: ignore[arg-type]
    ):
        pass
