"""fairscale's nn.model_parallel façade: its names, groups, errors and layers (init_method=)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from tests.torch.world import fake_world, run_world
from topology import TopologyError
from topology_torch.compat import fairscale as mpu
from topology_torch.compat._errors import FacadeAssertionError, NotInitializedError


def test_getters_before_initialize_raise_not_initialized() -> None:
    """Every getter raises an AssertionError (and TopologyError) saying "not initialized"."""
    assert not mpu.model_parallel_is_initialized()
    for getter in (
        mpu.get_model_parallel_group,
        mpu.get_model_parallel_rank,
        mpu.get_model_parallel_world_size,
        mpu.get_model_parallel_src_rank,
        mpu.get_data_parallel_group,
        mpu.get_pipeline_parallel_group,
        mpu.get_context_parallel_group,
    ):
        with pytest.raises(NotInitializedError, match=r"^compat.fairscale is not initialized"):
            getter()
    assert issubclass(NotInitializedError, AssertionError)
    assert issubclass(NotInitializedError, TopologyError)


def test_initialize_without_torch_distributed_raises_assertion_error() -> None:
    """Before init_process_group, initialize_model_parallel asserts as fairscale does."""
    with pytest.raises(AssertionError, match=r"torch.distributed is not initialized; call"):
        mpu.initialize_model_parallel(1)


def test_layout_and_lifecycle_on_a_fake_world() -> None:
    """16 ranks, mp2·cp2·pp2: fairscale's documented groups; double init and sizes assert."""
    with fake_world(16, 5):
        mpu.initialize_model_parallel(2, 2, 2)
        assert mpu.model_parallel_is_initialized()
        assert mpu.get_model_parallel_src_rank() == 4
        assert (mpu.get_model_parallel_rank(), mpu.get_model_parallel_world_size()) == (1, 2)
        assert mpu.get_context_parallel_ranks() == [5, 7]
        assert mpu.get_pipeline_parallel_ranks() == [1, 5]
        assert mpu.get_data_parallel_ranks() == [5, 13]
        with pytest.raises(FacadeAssertionError, match=r"compat.fairscale is already initialized"):
            mpu.initialize_model_parallel(2)
        mpu.destroy_model_parallel()
        assert not mpu.model_parallel_is_initialized()
        with pytest.raises(AssertionError, match=r"world_size 16 is not divisible by tp\(3\)"):
            mpu.initialize_model_parallel(3)
        assert not mpu.model_parallel_is_initialized()


def _groups_world(rank: int, world_size: int) -> None:
    mp = 2
    mpu.initialize_model_parallel(mp)
    assert mpu.get_model_parallel_rank() == rank % mp
    assert dist.get_world_size(group=mpu.get_model_parallel_group()) == mp
    assert dist.get_rank(group=mpu.get_model_parallel_group()) == rank % mp
    assert mpu.get_model_parallel_src_rank() == rank - rank % mp
    assert mpu.get_data_parallel_world_size() == world_size // mp
    assert dist.get_rank(group=mpu.get_data_parallel_group()) == rank // mp
    value = torch.tensor([float(rank)])
    dist.all_reduce(value, group=mpu.get_model_parallel_group())
    assert value.item() == sum(range(rank - rank % mp, rank - rank % mp + mp))
    mpu.destroy_model_parallel()
    assert not mpu.model_parallel_is_initialized()


def test_groups_are_real_communicators() -> None:
    """On 4 gloo ranks with mp 2 the getters answer fairscale's ranks and the groups reduce."""
    run_world(4, _groups_world)


def _affine_world(rank: int, world_size: int) -> None:
    mpu.initialize_model_parallel(world_size)
    out, inp = 3 * world_size, 5 * world_size
    for dim, part in ((0, 3), (1, 5)):
        shape = (part, inp) if dim == 0 else (out, part)
        weight = torch.empty(*shape)
        torch.manual_seed(12345)
        master = mpu._initialize_affine_weight(
            weight, out, inp, part, dim, nn.init.normal_, return_master_weight=True
        )
        torch.manual_seed(12345)
        want = nn.init.normal_(torch.empty(out, inp))
        assert master is not None and torch.equal(master, want)
        assert torch.equal(weight, torch.split(want, part, dim=dim)[rank])
    assert mpu._initialize_affine_weight(weight, out, inp, 5, 1, nn.init.ones_) is None
    mpu.destroy_model_parallel()


def test_initialize_affine_weight_slices_the_master_drawn_by_init_method() -> None:
    """_initialize_affine_weight: this rank's torch.split slice of init_method(master), seeded."""
    run_world(2, _affine_world)


def _embedding_world(rank: int, world_size: int) -> None:
    mpu.initialize_model_parallel(world_size)
    ids = torch.tensor([[0, 5, 7], [3, 3, 1]])
    grad = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(7)
    reference = nn.Embedding(8, 4)
    (reference(ids) * grad).sum().backward()
    assert reference.weight.grad is not None
    for cls, dim in ((mpu.ParallelEmbedding, 1), (mpu.VocabParallelEmbedding, 0)):
        torch.manual_seed(7)
        layer: Any = cls(8, 4, init_method=nn.init.normal_, keep_master_weight_for_test=True)
        out = layer(ids)
        assert torch.equal(out, reference(ids))
        (out * grad).sum().backward()
        want = torch.split(reference.weight.grad, 8 // world_size if dim == 0 else 2, dim)[rank]
        assert torch.equal(layer.weight.grad, want)
    mpu.destroy_model_parallel()


def test_embeddings_with_init_method_equal_nn_embedding() -> None:
    """init_method=nn.init.normal_ with nn.Embedding's seed: equal outputs and gradient slices."""
    run_world(2, _embedding_world)


def _layout_world(rank: int, world_size: int) -> None:
    mpu.initialize_model_parallel(world_size)
    ids = torch.randint(0, 48, (17, 23), generator=torch.Generator().manual_seed(2))
    weight = torch.randn(17, 23, 16, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(5)
    reference = nn.Embedding(48, 16)
    want = reference(ids)
    torch.manual_seed(5)
    layer = mpu.ParallelEmbedding(48, 16, init_method=nn.init.normal_)
    out = layer(ids)
    assert out.is_contiguous() and out.stride() == want.stride()
    # same layout, so the same reduction order: the losses agree to the last bit
    assert torch.equal(torch.mul(out, weight).sum(), torch.mul(want, weight).sum())
    x = torch.randn(3, 5, 6)
    column = mpu.ColumnParallelLinear(6, 4, gather_output=True)
    assert column(x).stride() == nn.functional.linear(x, column.master_weight).stride()
    mpu.destroy_model_parallel()


def test_gathered_outputs_are_row_major_like_the_unsplit_layer() -> None:
    """The gathered feature dim is contiguous (as torch.cat gives), so sums match bit for bit."""
    run_world(2, _layout_world)


def _linear_world(rank: int, world_size: int) -> None:
    mpu.initialize_model_parallel(world_size)
    torch.manual_seed(3)
    x = torch.randn(5, 6, requires_grad=True)
    g = torch.randn(5, 4)
    for cls, dim in ((mpu.ColumnParallelLinear, 0), (mpu.RowParallelLinear, 1)):
        layer: Any = cls(6, 4, keep_master_weight_for_test=True)
        master = layer.master_weight.detach()
        assert torch.equal(layer.get_master_weight(), master)
        x.grad = None
        (layer(x) * g).sum().backward()
        assert x.grad is not None
        torch.testing.assert_close(x.grad, g @ master)
        part = torch.split(g.t() @ x.detach(), 4 // world_size if dim == 0 else 3, dim)[rank]
        torch.testing.assert_close(layer.weight.grad, part)
    mpu.destroy_model_parallel()


def test_linear_layers_backpropagate_like_the_master_weight() -> None:
    """Column and row layers: dL/dX = dL/dY · A and dL/dA sliced, A the master weight."""
    run_world(2, _linear_world)


def test_init_method_and_init_type_are_one_choice() -> None:
    """Passing both a non-default init_type and init_method is refused; a non-callable too."""
    from topology_torch.ops import _SingleRank

    with pytest.raises(TopologyError, match=r"were both given; pass only one of them"):
        mpu.ColumnParallelLinear(2, 2, init_type="zeros", init_method=nn.init.ones_)
    with pytest.raises(TopologyError, match=r"init_method\('ones'\) must be a function"):
        mpu.RowParallelLinear(2, 2, init_method="ones", group=_SingleRank())  # type: ignore[arg-type]
    layer = mpu.ColumnParallelLinear(2, 3, init_method=nn.init.ones_, group=_SingleRank())
    assert torch.equal(layer.weight, torch.ones(3, 2))


def test_embedding_options_a_split_table_cannot_honour_are_refused() -> None:
    """max_norm and sparse=True are refused with the reason, not ignored."""
    from topology_torch.ops import _SingleRank

    with pytest.raises(TopologyError, match=r"max_norm\(1.0\) is not supported"):
        mpu.ParallelEmbedding(4, 2, max_norm=1.0, group=_SingleRank())
    with pytest.raises(TopologyError, match=r"sparse\(True\) is not supported"):
        mpu.VocabParallelEmbedding(4, 2, sparse=True, group=_SingleRank())
