"""Sequence parallelism: activations split along the sequence dim between layers equal torch.nn.

Each rank holds a contiguous slice of the sequence; the column layer all-gathers it, the row layer
reduce-scatters back. Outputs and gradients are compared with the plain model on the full sequence.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from tests.torch.test_layers import DTYPES, close, counting, indices, load, seeded, sub
from tests.torch.world import run_world
from topology_torch.layers import (
    ColumnParallelLinear,
    ParallelEmbedding,
    RowParallelLinear,
    VocabParallelEmbedding,
)
from topology_torch.ops import _SingleRank

HIDDEN, FFN, VOCAB, SEQ, BATCH = 8, 16, 16, 8, 3


def _mlp_reference(seed: int, dtype: torch.dtype) -> nn.Sequential:
    torch.manual_seed(seed)
    ref = nn.Sequential(nn.Linear(HIDDEN, FFN), nn.GELU(), nn.Linear(FFN, HIDDEN))
    with torch.no_grad():
        sub(ref, 0).bias.normal_()
        sub(ref, 2).bias.normal_()
    return ref.to(dtype)


def _params(linear: nn.Linear) -> tuple[torch.Tensor, torch.Tensor]:
    return linear.weight, linear.bias


def _parallel_mlp(
    ref: nn.Sequential,
    rank: int,
    n: int,
    group: Any,
    dtype: torch.dtype,
    seq_dim: int,
    lora: int | None,
) -> tuple[ColumnParallelLinear, RowParallelLinear]:
    kw: dict[str, Any] = {"group": group, "sequence_parallel": True, "sequence_dim": seq_dim}
    col = ColumnParallelLinear(HIDDEN, FFN, gather_output=False, lora_rank=lora, dtype=dtype, **kw)
    row = RowParallelLinear(FFN, HIDDEN, input_is_parallel=True, lora_rank=lora, dtype=dtype, **kw)
    idx = indices(FFN, n, rank)
    load(col.weight, sub(ref, 0).weight[idx])
    load(col.bias, sub(ref, 0).bias[idx])
    load(row.weight, sub(ref, 2).weight[:, idx])
    load(row.bias, sub(ref, 2).bias)
    return col, row


def check_mlp(rank: int, n: int, group: Any, dtype: torch.dtype) -> None:
    """Column(sp) -> gelu -> row(sp) on a sequence shard equals the plain MLP's shard, grads too.

    With LoRA (non-zero B) the reference is the plain formula with ``W + B @ A``.
    """
    part = SEQ // n
    idx = indices(FFN, n, rank)
    lin = nn.functional.linear
    for seq_dim in (0, 1):
        for lora in (None, 2):
            ref = _mlp_reference(5, dtype)
            col, row = _parallel_mlp(ref, rank, n, group, dtype, seq_dim, lora)
            w0, b0, w2, b2 = (
                t.detach().clone().requires_grad_()
                for t in (
                    sub(ref, 0).weight,
                    sub(ref, 0).bias,
                    sub(ref, 2).weight,
                    sub(ref, 2).bias,
                )
            )
            full0, full2 = w0, w2
            lora_refs: list[torch.Tensor] = []
            if lora is not None:
                a0, bb0 = seeded(10, lora, HIDDEN, dtype=dtype), seeded(11, FFN, lora, dtype=dtype)
                a2, bb2 = seeded(12, lora, FFN, dtype=dtype), seeded(13, HIDDEN, lora, dtype=dtype)
                lora_refs = [t.requires_grad_() for t in (a0, bb0, a2, bb2)]
                full0, full2 = w0 + bb0 @ a0, w2 + bb2 @ a2
                load(col.lora_a, a0)
                load(col.lora_b, bb0[idx])
                load(row.lora_a, a2[:, idx])
                load(row.lora_b, bb2)
            shape = (SEQ, BATCH, HIDDEN) if seq_dim == 0 else (BATCH, SEQ, HIDDEN)
            x = seeded(1, *shape, dtype=dtype).requires_grad_()
            g = seeded(2, *shape, dtype=dtype)
            want = lin(nn.functional.gelu(lin(x, full0, b0)), full2, b2)
            torch.autograd.backward((want * g).sum())
            x_shard = x.detach().narrow(seq_dim, rank * part, part).clone().requires_grad_()
            got = row(nn.functional.gelu(col(x_shard)))
            close(got, want.narrow(seq_dim, rank * part, part), dtype)
            torch.autograd.backward((got * g.narrow(seq_dim, rank * part, part)).sum())
            assert x.grad is not None and w0.grad is not None and w2.grad is not None
            assert b0.grad is not None and col.bias is not None and row.bias is not None
            close(x_shard.grad, x.grad.narrow(seq_dim, rank * part, part), dtype)
            close(col.weight.grad, w0.grad[idx], dtype)
            close(col.bias.grad, b0.grad[idx], dtype)
            close(row.weight.grad, w2.grad[:, idx], dtype)
            close(row.bias.grad, b2.grad, dtype)
            if lora_refs:
                ga0, gb0, ga2, gb2 = (t.grad for t in lora_refs)
                assert gb0 is not None and ga2 is not None
                assert col.lora_a is not None and col.lora_b is not None
                assert row.lora_a is not None and row.lora_b is not None
                close(col.lora_a.grad, ga0, dtype)
                close(col.lora_b.grad, gb0[idx], dtype)
                close(row.lora_a.grad, ga2[:, idx], dtype)
                close(row.lora_b.grad, gb2, dtype)


def check_embedding_model(rank: int, n: int, group: Any, dtype: torch.dtype) -> None:
    """Embedding(sp) -> column(sp) -> row(sp) equals embedding -> linear -> linear on a shard."""
    part = SEQ // n
    for cls in (ParallelEmbedding, VocabParallelEmbedding):
        torch.manual_seed(7)
        ref = nn.Sequential(nn.Embedding(VOCAB, HIDDEN), _mlp_reference(8, torch.float32))
        ref = ref.to(dtype)
        emb = cls(VOCAB, HIDDEN, group=group, sequence_parallel=True, sequence_dim=0, dtype=dtype)
        if cls is ParallelEmbedding:
            load(emb.weight, sub(ref, 0).weight[:, indices(HIDDEN, n, rank)])
        else:
            load(emb.weight, sub(ref, 0).weight[indices(VOCAB, n, rank)])
        col, row = _parallel_mlp(sub(ref, 1), rank, n, group, dtype, 0, None)
        ids = torch.arange(SEQ * BATCH).reshape(SEQ, BATCH) % VOCAB  # every shard boundary
        g = seeded(3, SEQ, BATCH, HIDDEN, dtype=dtype)
        want = ref(ids)
        torch.autograd.backward((want * g).sum())
        got = row(nn.functional.gelu(col(emb(ids))))
        close(got, want[rank * part : (rank + 1) * part], dtype)
        torch.autograd.backward((got * g[rank * part : (rank + 1) * part]).sum())
        wanted = sub(ref, 0).weight.grad
        assert wanted is not None
        if cls is ParallelEmbedding:
            close(emb.weight.grad, wanted[:, indices(HIDDEN, n, rank)], dtype)
        else:
            close(emb.weight.grad, wanted[indices(VOCAB, n, rank)], dtype)


def _kind(name: str) -> str:
    return (
        "all_gather"
        if name.startswith("all_gather")
        else ("reduce_scatter" if name.startswith("reduce_scatter") else name)
    )


def check_collectives(rank: int, n: int, group: Any) -> None:
    """sp: forward one all-gather + one reduce-scatter; backward the mirror plus the bias sum."""
    ref = _mlp_reference(5, torch.float32)
    col, row = _parallel_mlp(ref, rank, n, group, torch.float32, 0, None)
    x = seeded(1, SEQ // n, BATCH, HIDDEN).requires_grad_()
    with counting() as fwd:
        y = row(col(x))
    with counting() as bwd:
        torch.autograd.backward(y.sum())
    fwd_kinds = Counter({_kind(k): v for k, v in fwd.items()})
    bwd_kinds = Counter({_kind(k): v for k, v in bwd.items()})
    if n == 1:
        assert fwd_kinds == bwd_kinds == Counter()
        return
    assert fwd_kinds == Counter({"all_gather": 1, "reduce_scatter": 1}), fwd
    assert bwd_kinds == Counter({"all_gather": 1, "reduce_scatter": 1, "all_reduce": 1}), bwd


def _checks(rank: int, n: int, group: Any) -> None:
    for dtype in DTYPES:
        check_mlp(rank, n, group, dtype)
        check_embedding_model(rank, n, group, dtype)
    check_collectives(rank, n, group)


def _world(rank: int, n: int) -> None:
    _checks(rank, n, dist.new_group(list(range(n))))


def test_sequence_parallel_at_tp1() -> None:
    """At tp = 1 sequence parallelism is the plain model and costs no collective."""
    _checks(0, 1, _SingleRank())


@pytest.mark.parametrize("n", [2, 4])
def test_sequence_parallel_equals_torch_nn(n: int) -> None:
    """At tp = 2 and 4 sequence-parallel layers equal torch.nn on each rank's sequence slice."""
    run_world(n, _world)
