"""ezpz's current tp API: identity defaults, AssertionError on misuse, lifecycle, splitting,
its module globals, and its groups made without agreement (under mocks and on a gloo world)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from unittest.mock import MagicMock, patch

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st
from torch._C._distributed_c10d import HashStore

from tests.torch.world import fake_world, run_world
from topology import TopologyError
from topology_torch.compat import ezpz
from topology_torch.compat._errors import FacadeAssertionError, NotInitializedError


@given(st.integers(1, 64), st.integers(1, 16))
def test_divide_and_check_no_remainder_is_exact_division(n: int, d: int) -> None:
    """divide_and_check_no_remainder(n, d) is n // d when d divides n, else an AssertionError."""
    if n % d == 0:
        ezpz.ensure_divisibility(n, d)
        assert ezpz.divide_and_check_no_remainder(n, d) == n // d
    else:
        with pytest.raises(FacadeAssertionError, match=rf"^{n} is not divisible by {d} "):
            ezpz.divide_and_check_no_remainder(n, d)


@given(st.integers(1, 4), st.integers(1, 5), st.booleans())
def test_split_tensor_along_last_dim_concatenates_back(parts: int, size: int, cont: bool) -> None:
    """The parts have equal last dims and concatenate back to the tensor; contiguous on request."""
    tensor = torch.arange(3 * parts * size).reshape(3, parts * size)
    chunks = ezpz.split_tensor_along_last_dim(tensor, parts, contiguous_split_chunks=cont)
    assert len(chunks) == parts and all(c.shape == (3, size) for c in chunks)
    assert torch.equal(torch.cat(chunks, -1), tensor)
    assert not cont or all(c.is_contiguous() for c in chunks)


def test_tp_rank_and_world_size_are_0_and_1_before_initialization() -> None:
    """Callers may log tp rank and size unconditionally: 0 and 1 while not initialized."""
    assert not ezpz.tensor_parallel_is_initialized()
    assert (ezpz.get_tensor_parallel_rank(), ezpz.get_tensor_parallel_world_size()) == (0, 1)
    assert ezpz.get_tensor_parallel_src_rank() == 0


def test_group_getters_before_initialization_raise_not_initialized() -> None:
    """The group getters raise an AssertionError (and TopologyError) saying "not initialized"."""
    for getter in (
        ezpz.get_tensor_parallel_group,
        ezpz.get_data_parallel_group,
        ezpz.get_pipeline_parallel_group,
        ezpz.get_context_parallel_group,
        ezpz.get_context_parallel_ranks,
    ):
        with pytest.raises(NotInitializedError, match=r"^compat.ezpz is not initialized"):
            getter()
        with pytest.raises(TopologyError):
            getter()


def test_lifecycle_on_a_fake_world() -> None:
    """init (tp 2 or 1), double init asserts "already initialized", destroy, getters assert."""
    with fake_world(8, 3):
        ezpz.initialize_tensor_parallel(tensor_parallel_size=2)
        assert ezpz.tensor_parallel_is_initialized()
        assert (ezpz.get_tensor_parallel_rank(), ezpz.get_tensor_parallel_world_size()) == (1, 2)
        assert ezpz.get_tensor_parallel_src_rank() == 2
        with pytest.raises(AssertionError, match=r"compat.ezpz is already initialized"):
            ezpz.initialize_tensor_parallel(tensor_parallel_size=2)
        ezpz.destroy_tensor_parallel()
        assert not ezpz.tensor_parallel_is_initialized()
        assert (ezpz.get_tensor_parallel_rank(), ezpz.get_tensor_parallel_world_size()) == (0, 1)
        assert ezpz.get_tensor_parallel_src_rank() == 3
        for getter in (
            ezpz.get_tensor_parallel_group,
            ezpz.get_data_parallel_group,
            ezpz.get_pipeline_parallel_group,
            ezpz.get_context_parallel_group,
        ):
            with pytest.raises(AssertionError, match="not initialized"):
                getter()
        ezpz.initialize_tensor_parallel(tensor_parallel_size=1)
        assert ezpz.get_data_parallel_world_size() == 8
        ezpz.destroy_tensor_parallel()


def test_sizes_that_do_not_fit_raise_assertion_error() -> None:
    """A tp that does not divide the world asserts, with the arithmetic."""
    with fake_world(8, 0):
        with pytest.raises(AssertionError, match=r"world_size 8 is not divisible by tp\(3\)"):
            ezpz.initialize_tensor_parallel(3)
        assert not ezpz.tensor_parallel_is_initialized()


def _identity_world(rank: int, world_size: int) -> None:
    assert ezpz.get_tensor_parallel_src_rank() == rank
    ezpz.initialize_tensor_parallel(2)
    value = torch.tensor([1.0])
    torch.distributed.all_reduce(value, group=ezpz.get_tensor_parallel_group())
    assert value.item() == ezpz.get_tensor_parallel_world_size() == 2
    ezpz.destroy_tensor_parallel()


def test_tp_group_is_a_real_communicator() -> None:
    """On 2 gloo ranks the tp group reduces over both; before init each rank is its own src."""
    run_world(2, _identity_world)


# -- ezpz's module globals and its groups --------------------------------------------------------

WORDS = {"tp": "tensor", "dp": "data", "pp": "pipeline", "cp": "context"}
GROUP_GLOBALS = {
    "tp": "_TENSOR_PARALLEL_GROUP",
    "dp": "_DATA_PARALLEL_GROUP",
    "pp": "_PIPELINE_PARALLEL_GROUP",
    "cp": "_CONTEXT_PARALLEL_GROUP",
}
RANKS_GLOBALS = {
    "tp": "_TENSOR_PARALLEL_RANKS",
    "dp": "_DATA_PARALLEL_RANKS",
    "pp": "_PIPELINE_PARALLEL_RANKS",
    "cp": "_CONTEXT_PARALLEL_GROUP_RANKS",
}
ALL_GLOBALS = [*GROUP_GLOBALS.values(), *RANKS_GLOBALS.values()]
SIZES_8 = [
    (tp, pp, cp)
    for tp in (1, 2, 4, 8)
    for pp in (1, 2, 4, 8)
    for cp in (1, 2, 4, 8)
    if 8 % (tp * pp * cp) == 0
]


def ezpz_groups(world: int, tp: int, pp: int, cp: int) -> dict[str, list[list[int]]]:
    """ezpz's groups as its docstring defines them: slices of arange(world).reshape(dp, pp, cp,
    tp) along each axis (an independent formulation of Topology.ezpz)."""
    grid = torch.arange(world).reshape(world // (tp * pp * cp), pp, cp, tp)
    axes = {"dp": 0, "pp": 1, "cp": 2, "tp": 3}
    return {
        kind: [row.tolist() for row in grid.movedim(axis, -1).reshape(-1, grid.shape[axis])]
        for kind, axis in axes.items()
    }


def shared_groups(groups: dict[str, list[list[int]]]) -> list[list[int]]:
    """The groups of more than one rank: those every rank makes (singletons are made on use)."""
    distinct = {tuple(g) for kind_groups in groups.values() for g in kind_groups if len(g) > 1}
    return sorted(list(g) for g in distinct)


def expected_tp_src(groups: dict[str, list[list[int]]], rank: int) -> int:
    """ezpz's formula: (rank // tp) * tp."""
    tp = len(groups["tp"][0])
    return (rank // tp) * tp


Call = tuple[list[int], dict[str, Any], Any]  # a new_group call: ranks, kwargs, the result


@contextmanager
def mocked_distributed(world: int, rank: int) -> Iterator[list[Call]]:
    """torch.distributed mocked the way ezpz's tests do it (no default group exists at all):
    yields the list of every new_group call; each returns a new MagicMock."""
    calls: list[Call] = []

    def new_group(ranks: list[int], **kwargs: Any) -> Any:
        group = MagicMock(name=f"group{list(ranks)}")
        calls.append((list(ranks), kwargs, group))
        return group

    with (
        patch("torch.distributed.is_initialized", return_value=True),
        patch("torch.distributed.get_world_size", return_value=world),
        patch("torch.distributed.get_rank", return_value=rank),
        patch("torch.distributed.new_group", new_group),
    ):
        try:
            yield calls
        finally:
            ezpz.destroy_tensor_parallel()
    ezpz.destroy_tensor_parallel()  # again without the mocks: a quiet no-op


def test_globals_are_none_before_initialization() -> None:
    """Every ezpz module global reads None while nothing is initialized."""
    assert [getattr(ezpz, name) for name in ALL_GLOBALS] == [None] * len(ALL_GLOBALS)
    with pytest.raises(AttributeError, match="has no attribute '_NO_SUCH_GLOBAL'"):
        ezpz._NO_SUCH_GLOBAL  # noqa: B018


_assignments = st.fixed_dictionaries(
    {},
    optional={
        **{name: st.one_of(st.none(), st.builds(object)) for name in GROUP_GLOBALS.values()},
        **{
            name: st.one_of(st.none(), st.lists(st.integers(0, 7), min_size=1, max_size=4))
            for name in RANKS_GLOBALS.values()
        },
    },
)


@given(_assignments)
def test_assigned_globals_are_what_getters_answer_until_destroy(assigned: dict[str, Any]) -> None:
    """As in ezpz: an assigned global is read back and answered by its getter; initialized means
    all four group globals hold a group; destroy resets every global to None."""
    try:
        for name, value in assigned.items():
            setattr(ezpz, name, value)
        for name in ALL_GLOBALS:
            assert getattr(ezpz, name) is assigned.get(name)
        set_groups = [assigned.get(name) is not None for name in GROUP_GLOBALS.values()]
        assert ezpz.tensor_parallel_is_initialized() is all(set_groups)
        for kind, word in WORDS.items():
            for name, getter in (
                (GROUP_GLOBALS[kind], getattr(ezpz, f"get_{word}_parallel_group")),
                (RANKS_GLOBALS[kind], getattr(ezpz, f"get_{word}_parallel_ranks")),
            ):
                if assigned.get(name) is None:
                    with pytest.raises(NotInitializedError, match="is not initialized"):
                        getter()
                else:
                    assert getter() == assigned[name]
        if assigned.get("_TENSOR_PARALLEL_GROUP") is None:
            assert ezpz.get_tensor_parallel_rank() == 0
            assert ezpz.get_tensor_parallel_world_size() == 1
    finally:
        ezpz.destroy_tensor_parallel()
    assert [getattr(ezpz, name) for name in ALL_GLOBALS] == [None] * len(ALL_GLOBALS)
    assert not ezpz.tensor_parallel_is_initialized()


def test_deleting_an_assigned_global_reads_the_groups_again() -> None:
    """``del`` undoes an assignment (as monkeypatch's undo may): the global reads our state."""
    ezpz._TENSOR_PARALLEL_RANKS = [5]
    del ezpz._TENSOR_PARALLEL_RANKS
    assert ezpz._TENSOR_PARALLEL_RANKS is None
    with fake_world(8, 3):
        ezpz.initialize_tensor_parallel(2)
        ezpz._TENSOR_PARALLEL_RANKS = [7]
        assert ezpz.get_tensor_parallel_ranks() == [7]
        del ezpz._TENSOR_PARALLEL_RANKS
        assert ezpz._TENSOR_PARALLEL_RANKS == ezpz.get_tensor_parallel_ranks() == [2, 3]
        ezpz.destroy_tensor_parallel()


def test_initialize_refuses_while_a_group_global_is_assigned() -> None:
    """ezpz asserts its globals are None before creating; a global assigned None gives way."""
    with fake_world(8, 3):
        ezpz._PIPELINE_PARALLEL_GROUP = object()
        with pytest.raises(
            FacadeAssertionError,
            match=r"^compat.ezpz is already initialized: _PIPELINE_PARALLEL_GROUP assigned; "
            r"call compat.ezpz.destroy_tensor_parallel\(\) first$",
        ):
            ezpz.initialize_tensor_parallel(2)
        ezpz._PIPELINE_PARALLEL_GROUP = None
        ezpz.initialize_tensor_parallel(2)
        assert ezpz._PIPELINE_PARALLEL_GROUP is ezpz.get_pipeline_parallel_group() is not None
        assert ezpz._PIPELINE_PARALLEL_RANKS == [3]
        ezpz.destroy_tensor_parallel()


@settings(deadline=None)
@given(st.sampled_from(SIZES_8), st.integers(0, 7))
def test_under_mocked_distributed_each_rank_gets_ezpz_groups(
    sizes: tuple[int, int, int], rank: int
) -> None:
    """With torch.distributed mocked as ezpz's tests do (no default group): one new_group per
    distinct shared ezpz group, and the globals and getters hold this rank's ezpz groups."""
    tp, pp, cp = sizes
    expected = ezpz_groups(8, tp, pp, cp)
    with mocked_distributed(8, rank) as calls:
        ezpz.initialize_tensor_parallel(tp, pp, cp)
        assert not dist.distributed_c10d.is_initialized()  # nothing but the mocks answered
        assert ezpz.tensor_parallel_is_initialized()
        assert sorted(ranks for ranks, _, _ in calls) == shared_groups(expected)
        for kind, word in WORDS.items():
            mine = next(g for g in expected[kind] if rank in g)
            group = getattr(ezpz, GROUP_GLOBALS[kind])  # a singleton is made now, by this rank
            assert [made for ranks, _, made in calls if ranks == mine] == [group]
            assert getattr(ezpz, f"get_{word}_parallel_group")() is group
            assert getattr(ezpz, RANKS_GLOBALS[kind]) == mine
            assert getattr(ezpz, f"get_{word}_parallel_ranks")() == mine
            assert getattr(ezpz, f"get_{word}_parallel_rank")() == mine.index(rank)
            assert getattr(ezpz, f"get_{word}_parallel_world_size")() == len(mine)
        assert ezpz.get_tensor_parallel_src_rank() == expected_tp_src(expected, rank)
        with pytest.raises(AssertionError, match="already initialized"):
            ezpz.initialize_tensor_parallel(tp, pp, cp)
        ezpz.destroy_tensor_parallel()
        assert not ezpz.tensor_parallel_is_initialized()
        with pytest.raises(AssertionError, match="not initialized"):
            ezpz.get_data_parallel_group()


@pytest.mark.parametrize("sizes", SIZES_8, ids=str)
def test_under_mocked_distributed_every_rank_calls_new_group_in_one_order(
    sizes: tuple[int, int, int],
) -> None:
    """Without agreement the order of new_group calls is the only contract: equal on all ranks."""
    orders = []
    for rank in range(8):
        with mocked_distributed(8, rank) as calls:
            ezpz.initialize_tensor_parallel(*sizes)
            orders.append([ranks for ranks, _, _ in calls])
    assert all(order == orders[0] for order in orders)


def test_under_mocked_distributed_backends_and_timeout_reach_new_group() -> None:
    """Each kind's backend and the timeout are passed to new_group for that kind's groups."""
    tp_groups = ezpz_groups(8, 2, 2, 1)["tp"]
    with mocked_distributed(8, 0) as calls:
        ezpz.initialize_tensor_parallel(
            2, 2, tensor_parallel_backend="gloo", timeout=timedelta(minutes=3)
        )
        assert calls
        for ranks, kwargs, _ in calls:
            assert kwargs["backend"] == ("gloo" if ranks in tp_groups else None), ranks
            assert kwargs["timeout"] == timedelta(minutes=3)


def test_destroy_after_the_world_was_destroyed_is_quiet() -> None:
    """Groups torch already destroyed (with its whole world) are not destroyed twice."""
    dist.init_process_group("gloo", store=HashStore(), rank=0, world_size=1)
    try:
        ezpz.initialize_tensor_parallel()
        assert ezpz.get_tensor_parallel_group() is not None  # a singleton, made now
    finally:
        dist.destroy_process_group()
    ezpz.destroy_tensor_parallel()
    assert not ezpz.tensor_parallel_is_initialized()


def _ezpz_groups_world(rank: int, world_size: int) -> None:
    original = dist.new_group
    calls: list[list[int]] = []

    def recording(ranks: list[int], **kwargs: Any) -> Any:
        calls.append(list(ranks))
        return original(ranks, **kwargs)

    with patch("torch.distributed.new_group", recording):
        for sizes in [(2, 1, 1), (1, 2, 2), (4, 1, 1), (1, 1, 1)]:
            calls.clear()
            ezpz.initialize_tensor_parallel(*sizes)
            expected = ezpz_groups(world_size, *sizes)
            assert sorted(calls) == shared_groups(expected), sizes
            for kind, word in WORDS.items():
                mine = next(g for g in expected[kind] if rank in g)
                group = getattr(ezpz, f"get_{word}_parallel_group")()
                assert getattr(ezpz, GROUP_GLOBALS[kind]) is group
                assert getattr(ezpz, RANKS_GLOBALS[kind]) == mine
                assert dist.get_process_group_ranks(group) == mine
                assert group is not dist.group.WORLD  # a group of every rank is its own
                value = torch.tensor([float(rank)])
                dist.all_reduce(value, group=group)
                assert value.item() == sum(mine), (sizes, kind)
            ezpz.destroy_tensor_parallel()
            assert all(getattr(ezpz, name) is None for name in ALL_GLOBALS)
    for name in GROUP_GLOBALS.values():  # ezpz's effect of assigning its globals
        setattr(ezpz, name, dist.group.WORLD)
    assert ezpz.tensor_parallel_is_initialized()
    assert ezpz.get_tensor_parallel_rank() == rank
    assert ezpz.get_data_parallel_world_size() == world_size
    assert ezpz.get_tensor_parallel_src_rank() == 0
    ezpz.destroy_tensor_parallel()
    assert not ezpz.tensor_parallel_is_initialized()


def test_groups_without_agreement_on_a_gloo_world_are_ezpz_groups() -> None:
    """On 4 gloo ranks: one new_group per shared ezpz group on every rank, every group reduces
    over exactly its ezpz ranks, and the globals hold them."""
    run_world(4, _ezpz_groups_world)
