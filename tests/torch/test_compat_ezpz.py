"""ezpz's current tp API: identity defaults, AssertionError on misuse, lifecycle, splitting."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

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
