"""Embedding ids: both parallel embeddings reject exactly the ids ``torch.nn.Embedding`` rejects.

For every tp (1, 2, 4, real gloo worlds) and every id tensor below, the verdict of a plain
``nn.Embedding`` (does it raise ``IndexError``?) is the oracle: the parallel layer must raise
:class:`IdOutOfRangeError` (an ``IndexError`` and a ``TopologyError``) on every rank for those ids,
and return ``nn.Embedding``'s output for the others. Valid ids, ``padding_idx`` and
``scale_grad_by_freq`` keep forward and gradient equal to ``nn.Embedding``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from tests.torch.test_layers import close, indices, load, seeded
from tests.torch.world import run_world
from topology import TopologyError
from topology_torch.layers import IdOutOfRangeError, ParallelEmbedding, VocabParallelEmbedding
from topology_torch.ops import _SingleRank

VOCAB, DIM = 8, 4  # VOCAB and DIM divisible by every tp
LAYERS = (ParallelEmbedding, VocabParallelEmbedding)
BAD = (-1, -VOCAB, -(2**40), VOCAB, VOCAB + 1, 2**40)


def id_cases() -> list[torch.Tensor]:
    """Every single id in [-3, VOCAB + 3), 0-d and empty ids, and one bad id at each 2-d spot."""
    cases = [torch.tensor([i]) for i in range(-3, VOCAB + 3)]
    cases += [
        torch.tensor(VOCAB),
        torch.tensor(-1),
        torch.tensor(3),
        torch.ones(0, dtype=torch.long),
    ]
    base = torch.arange(VOCAB).reshape(4, 2)
    cases.append(base)
    for spot in range(base.numel()):
        for bad in BAD:
            ids = base.clone()
            ids.view(-1)[spot] = bad
            cases.append(ids)
    cases += [case.to(torch.int32) for case in cases[:: VOCAB // 2] if case.abs().max() < 2**31]
    return cases


def nn_rejects(ids: torch.Tensor) -> bool:
    """The oracle: whether ``torch.nn.Embedding(VOCAB, DIM)`` raises IndexError for ``ids``."""
    try:
        nn.Embedding(VOCAB, DIM)(ids)
    except IndexError:
        return True
    return False


def parallel(cls: type[nn.Module], n: int, rank: int, group: Any, **kw: Any) -> Any:
    """A parallel embedding of ``cls`` holding its slice of the reference table ``seeded(1)``."""
    layer: Any = cls(VOCAB, DIM, group=group, **kw)
    full = seeded(1, VOCAB, DIM)
    if cls is ParallelEmbedding:
        load(layer.weight, full[:, indices(DIM, n, rank)])
    else:
        load(layer.weight, full[indices(VOCAB, n, rank)])
    return layer


def check_verdicts(rank: int, n: int, group: Any) -> None:
    """Every id tensor: the layer raises IdOutOfRangeError iff nn.Embedding raises IndexError."""
    reference = nn.Embedding(VOCAB, DIM)
    load(reference.weight, seeded(1, VOCAB, DIM))
    for cls in LAYERS:
        for sequence_parallel in (False, True):
            layer = parallel(cls, n, rank, group, sequence_parallel=sequence_parallel)
            for ids in id_cases():
                if sequence_parallel and (ids.dim() == 0 or ids.shape[0] % n):
                    continue
                if nn_rejects(ids):
                    with pytest.raises(IdOutOfRangeError, match="is outside"):
                        layer(ids)
                    continue
                want = reference(ids)
                if sequence_parallel:
                    part = ids.shape[0] // n
                    want = want[rank * part : (rank + 1) * part]
                close(layer(ids), want, torch.float32)


def check_message(rank: int, n: int, group: Any) -> None:
    """The error names the first bad id, its position, the range and how many ids are bad."""
    ids = torch.arange(VOCAB).reshape(4, 2)
    ids[1, 0], ids[3, 1] = VOCAB, -1
    expected = (
        r"ids\[1, 0\] = 8 is outside \[0, 8\) for num_embeddings\(8\) "
        r"\(2 of 8 ids are out of range\); pass ids in \[0, 7\]"
    )
    for cls in LAYERS:
        with pytest.raises(IdOutOfRangeError, match=expected):
            parallel(cls, n, rank, group)(ids)


def check_padding_and_freq(rank: int, n: int, group: Any) -> None:
    """padding_idx (also negative) and scale_grad_by_freq: forward and grads equal nn.Embedding."""
    ids = torch.tensor([[0, 7, 7, 3], [4, 7, 0, 0]])
    g = seeded(2, 2, 4, DIM)
    for cls in LAYERS:
        for padding in (None, 0, -1, VOCAB // 2 + 1):
            freqs = (False, True) if cls is ParallelEmbedding else (False,)
            for freq in freqs:
                kw: dict[str, Any] = {"padding_idx": padding}
                if freq:
                    kw["scale_grad_by_freq"] = True
                reference = nn.Embedding(VOCAB, DIM, **kw)
                load(reference.weight, seeded(1, VOCAB, DIM))
                layer = parallel(cls, n, rank, group, **kw)
                want, got = reference(ids), layer(ids)
                close(got, want, torch.float32)
                torch.autograd.backward((want * g).sum())
                torch.autograd.backward((got * g).sum())
                assert reference.weight.grad is not None
                if cls is ParallelEmbedding:
                    wanted = reference.weight.grad[:, indices(DIM, n, rank)]
                else:
                    wanted = reference.weight.grad[indices(VOCAB, n, rank)]
                close(layer.weight.grad, wanted, torch.float32)


def _verdict_world(rank: int, n: int) -> None:
    group = dist.new_group(list(range(n)))
    check_verdicts(rank, n, group)
    check_message(rank, n, group)
    dist.barrier(group)  # every rank raised alike and no collective was left half-done


def _padding_world(rank: int, n: int) -> None:
    check_padding_and_freq(rank, n, dist.new_group(list(range(n))))


@pytest.mark.parametrize("n", [1, 2, 4])
def test_out_of_range_ids_raise_where_nn_embedding_does(n: int) -> None:
    """At tp = n both layers raise IdOutOfRangeError exactly for the ids nn.Embedding rejects."""
    run_world(n, _verdict_world)


@pytest.mark.parametrize("n", [1, 2, 4])
def test_padding_and_freq_equal_nn_embedding(n: int) -> None:
    """At tp = n padding_idx and scale_grad_by_freq behave as in nn.Embedding, grads included."""
    run_world(n, _padding_world)


def test_id_error_is_index_error_and_topology_error() -> None:
    """IdOutOfRangeError is caught by `except IndexError` (as nn.Embedding's) and TopologyError."""
    layer = VocabParallelEmbedding(VOCAB, DIM, group=_SingleRank())
    with pytest.raises(IndexError):
        layer(torch.tensor([VOCAB]))
    with pytest.raises(TopologyError):
        layer(torch.tensor([-1]))


@pytest.mark.parametrize("cls", LAYERS)
def test_ids_of_the_wrong_type_raise_topology_error(cls: type[nn.Module]) -> None:
    """Float ids and non-tensors raise TopologyError saying which ids are accepted."""
    layer = cls(VOCAB, DIM, group=_SingleRank())
    with pytest.raises(TopologyError, match=r"ids have dtype torch.float32; pass int64 or int32"):
        layer(torch.tensor([1.0]))
    with pytest.raises(TopologyError, match=r"ids\(\[1, 2\]\) has type list, not a tensor"):
        layer([1, 2])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("cls", LAYERS)
def test_cuda_id_check_does_not_synchronise(cls: type[nn.Module]) -> None:
    """On CUDA the id check is a device-side assertion: valid ids run without a host sync."""
    layer = cls(VOCAB, DIM, group=_SingleRank(), device="cuda")
    ids = torch.arange(VOCAB, device="cuda")
    torch.cuda.set_sync_debug_mode("error")
    try:
        layer(ids)
    finally:
        torch.cuda.set_sync_debug_mode("default")
