"""ml-starter's façades: differentiable master weights and maybe_lora on the split layers."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.torch.world import run_world
from topology import TopologyError
from topology_torch.compat import ml
from topology_torch.compat.ml_lora import freeze_non_lora_, lora, maybe_lora
from topology_torch.layers import ColumnParallelLinear, ParallelEmbedding, RowParallelLinear
from topology_torch.ops import _SingleRank


class _Model(nn.Module):
    """Embedding and two-layer MLP; ``forward`` gives the split and the master-weight result."""

    def __init__(self, r: int | None) -> None:
        super().__init__()
        self.emb = maybe_lora(ParallelEmbedding(10, 12), r, freeze=False)
        self.l1 = maybe_lora(ColumnParallelLinear(12, 16, bias=False), r, freeze=False)
        self.l2 = maybe_lora(RowParallelLinear(16, 8, bias=False), r, freeze=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        split = self.l2(self.l1(self.emb(x)))
        emb, w1, w2 = self.emb.master_weight, self.l1.master_weight, self.l2.master_weight
        return split, F.linear(F.linear(F.embedding(x, emb), w1), w2)


def _master_world(rank: int, world_size: int) -> None:
    torch.manual_seed(1337)
    ml.init_parallelism(2)
    model = _Model(None)
    x = torch.randint(0, 9, (4, 12))
    grads = []
    for pick in (0, 1):
        model.zero_grad()
        outputs = model(x)
        outputs[pick].sum().backward()
        grads.append([p.grad.clone() for p in (model.emb.weight, model.l1.weight, model.l2.weight)])
        torch.testing.assert_close(outputs[0], outputs[1], atol=1e-5, rtol=1e-5)
    for split, full in zip(*grads, strict=True):
        torch.testing.assert_close(split, full, atol=1e-5, rtol=1e-5)
    ml.reset_parallelism()


def test_master_weights_backpropagate_into_the_shards() -> None:
    """4 ranks, mp 2: a model built from master weights gives the split model's output and grads."""
    run_world(4, _master_world)


def _lora_world(rank: int, world_size: int) -> None:
    torch.manual_seed(1337)
    ml.init_parallelism(2)
    model = _Model(2)
    x = torch.randint(0, 9, (4, 12))
    split, full = model(x)
    torch.testing.assert_close(split, full)
    split.sum().backward()
    for layer in (model.emb, model.l1, model.l2):
        assert not layer.weight.requires_grad and layer.weight.grad is None
        assert layer.lora_b.grad is not None and layer.lora_b.grad.abs().sum() > 0
        assert layer.lora_a.grad is not None
    ml.reset_parallelism()


def test_maybe_lora_adapts_all_three_split_layers() -> None:
    """maybe_lora(layer, 2): forward unchanged at start, base weights frozen, adapters train."""
    run_world(2, _lora_world)


def _adapted_embedding_world(rank: int, world_size: int) -> None:
    ml.init_parallelism(world_size)
    torch.manual_seed(5)
    layer = lora(ParallelEmbedding(6, 4), 3, alpha=6.0)
    torch.manual_seed(9)
    full_b = torch.randn(4, 3)
    with torch.no_grad():
        layer.lora_b.copy_(torch.split(full_b, 4 // world_size)[rank])
    ids = torch.tensor([[0, 5, 2]])
    want = F.embedding(ids, layer.master_weight.detach() + 2.0 * (full_b @ layer.lora_a).t())
    torch.testing.assert_close(layer(ids), want)
    ml.reset_parallelism()


def test_embedding_adapter_adds_scaled_b_a_to_the_rows() -> None:
    """ParallelEmbedding with LoRA looks up W + (alpha / r)(B A)ᵀ, B split across 2 ranks."""
    run_world(2, _adapted_embedding_world)


def test_master_weight_is_differentiable_on_one_rank() -> None:
    """At tp 1 master_weight is a copy whose gradient reaches weight (not the weight itself)."""
    layer = ColumnParallelLinear(3, 2, group=_SingleRank())
    master = layer.master_weight
    assert master is not layer.weight and master.requires_grad
    master.sum().backward()
    assert torch.equal(layer.weight.grad, torch.ones(2, 3))


def test_maybe_lora_without_rank_freezes_on_request() -> None:
    """maybe_lora(layer, None) returns the layer, frozen unless freeze=False."""
    layer = RowParallelLinear(4, 2, group=_SingleRank())
    assert maybe_lora(layer, None, freeze=False) is layer and layer.weight.requires_grad
    assert maybe_lora(layer, None) is layer and not layer.weight.requires_grad


def test_freeze_non_lora_leaves_only_the_adapters_trainable() -> None:
    """freeze_non_lora_ freezes weight and bias and keeps lora_a, lora_b trainable."""
    layer: Any = ColumnParallelLinear(4, 2, lora_rank=2, group=_SingleRank())
    freeze_non_lora_(nn.Sequential(layer))
    trainable = {n for n, p in layer.named_parameters() if p.requires_grad}
    assert trainable == {"lora_a", "lora_b"}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: lora(nn.Linear(2, 2), 2), r"lora got a Linear; it adapts the model-parallel"),
        (lambda: lora(_column(), 2, dropout=0.1), r"dropout\(0.1\) is not supported"),
        (lambda: lora(_column(), 2, merge=True), r"merge\(True\) is not supported"),
        (lambda: lora(lora(_column(), 2), 2), r"already has a LoRA adapter of rank 2"),
        (lambda: lora(_column(), 0), r"lora_rank must be a positive int, got 0 \(int\)"),
        (lambda: lora(_column(), 2, alpha="x"), r"lora_alpha\('x'\) must be a finite number"),
    ],
)
def test_lora_refusals_name_the_reason(call: Any, message: str) -> None:
    """Unsupported modules, dropout, merge, a second adapter and bad ranks raise TopologyError."""
    with pytest.raises(TopologyError, match=message):
        call()


def _column() -> ColumnParallelLinear:
    return ColumnParallelLinear(4, 2, group=_SingleRank())
