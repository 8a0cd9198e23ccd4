"""Embeddings split across the tp group: by embedding dim, or by vocabulary."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from topology import TopologyError

from .._debug_checks import show as _show
from ..ops import (
    group_rank,
    group_size,
    mp_copy,
    mp_gather,
    mp_reduce,
    mp_scatter,
    resolve_group,
    sp_scatter,
)
from ._args import check_flag, check_int, check_size, factory_kwargs
from ._ids import check_ids
from ._init import (
    Initializer,
    InitMethod,
    choose_init,
    gather_master,
    initialize_model_parallel_affine_weight_,
    new_master,
    to_param,
)
from ._linear import check_no_adapter, local_size, lora_scaling

__all__ = ["ParallelEmbedding", "VocabParallelEmbedding"]


def _check_padding(padding_idx: int | None, num_embeddings: int) -> int | None:
    if padding_idx is None:
        return None
    if type(padding_idx) is not int or not -num_embeddings <= padding_idx < num_embeddings:
        raise TopologyError(
            f"padding_idx({_show(padding_idx)}) must be an int in [{-num_embeddings}, "
            f"{num_embeddings - 1}] for num_embeddings({num_embeddings}); pass an id in range"
        )
    return padding_idx % num_embeddings


def _check_embedding_options(max_norm: object, norm_type: object, sparse: object) -> None:
    """``nn.Embedding``'s options that a split table cannot honour are refused, not ignored."""
    if max_norm is not None:
        raise TopologyError(
            f"max_norm({_show(max_norm)}) is not supported: renormalising a row in place needs "
            "the whole row, which no rank holds alone (and masked ids would renormalise row 0); "
            "pass max_norm=None and clip the weights after the optimizer step"
        )
    if type(norm_type) not in (int, float):
        raise TopologyError(f"norm_type({_show(norm_type)}) must be a number such as 2.0")
    if sparse is not False:
        raise TopologyError(
            f"sparse({_show(sparse)}) is not supported: the gradient of a split table passes "
            "through dense collectives; pass sparse=False"
        )


class ParallelEmbedding(nn.Module):
    """``nn.Embedding`` with the embedding dim split across ``group``; every rank gets all rows.

    Rank ``r`` holds ``weight`` ``(num_embeddings, embedding_dim / tp)``; the forward looks up
    this rank's features and all-gathers them (the backward keeps this rank's gradient slice).
    With ``sequence_parallel`` the output keeps only this rank's slice of ``sequence_dim``.

    Args:
        num_embeddings: vocabulary size.
        embedding_dim: feature size, divisible by the group size.
        padding_idx, scale_grad_by_freq: as in ``nn.Embedding``.
        init_type: one of the 13 :data:`INIT_TYPES` (seed every rank equally).
        group: the tp group; ``None`` means ``topology_torch.current().group("tp")``.

    >>> import torch
    >>> from topology_torch.ops import _SingleRank
    >>> ParallelEmbedding(10, 4, group=_SingleRank())(torch.tensor([[1, 2]])).shape
    torch.Size([1, 2, 4])
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        init_type: Initializer = "xavier_normal",
        group: Any = None,
        *,
        sequence_parallel: bool = False,
        sequence_dim: int = 0,
        device: Any = None,
        dtype: Any = None,
        init_method: InitMethod | None = None,
        keep_master_weight_for_test: bool = False,
    ) -> None:
        super().__init__()
        check_size("num_embeddings", num_embeddings)
        check_size("embedding_dim", embedding_dim)
        init = choose_init(init_type, init_method)
        _check_embedding_options(max_norm, norm_type, sparse)
        self.keep_master_weight_for_test = check_flag(
            "keep_master_weight_for_test", keep_master_weight_for_test
        )
        self.padding_idx = _check_padding(padding_idx, num_embeddings)
        self.scale_grad_by_freq = check_flag("scale_grad_by_freq", scale_grad_by_freq)
        self.sequence_parallel = check_flag("sequence_parallel", sequence_parallel)
        self.sequence_dim = check_int("sequence_dim", sequence_dim)
        kw = factory_kwargs(device, dtype)
        self.group = resolve_group(group)
        self.tp = group_size(self.group)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        local = local_size("embedding_dim", embedding_dim, self.tp, 1)
        self.init_type = init
        self.weight = nn.Parameter(torch.empty(num_embeddings, local, **kw))
        initialize_model_parallel_affine_weight_(
            self.weight, num_embeddings, embedding_dim, local, 1, init, 1, self.group
        )
        if self.padding_idx is not None:
            with torch.no_grad():
                self.weight[self.padding_idx].zero_()
        self.lora_rank: int | None = None
        self.lora_scaling = 1.0
        self.lora_a: nn.Parameter | None = None
        self.lora_b: nn.Parameter | None = None

    def add_lora_(self, rank: int, alpha: float | None = None) -> ParallelEmbedding:
        """Add a LoRA adapter in place and return the layer: rows ``W + (alpha / rank) (B A)ᵀ``.

        A ``(rank, num_embeddings)`` is replicated (one kaiming-normal master from the global
        generator: seed every rank equally), B ``(embedding_dim / tp, rank)`` is split like
        ``weight`` and zero, so the output is unchanged until B trains. ``alpha=None`` scales
        by 1. A's gradient is summed over the group (each rank sees its features only).

        Raises:
            TopologyError: a bad ``rank`` or ``alpha``, or the layer already has an adapter.
        """
        rank = check_size("lora_rank", rank)
        scaling = lora_scaling(rank, alpha)
        check_no_adapter(self)
        master = new_master(rank, self.num_embeddings, like=self.weight)
        if master.device.type != "meta":
            nn.init.kaiming_normal_(master, a=5**0.5)
        self.lora_a = nn.Parameter(to_param(master, self.weight).to(device=self.weight.device))
        self.lora_b = nn.Parameter(self.weight.new_zeros(self.weight.shape[1], rank))
        self.lora_rank, self.lora_scaling = rank, scaling
        return self

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Embed integer ``ids`` (replicated on the group) into ``(*ids.shape, embedding_dim)``.

        Raises:
            IdOutOfRangeError: an id outside ``[0, num_embeddings)`` (as ``nn.Embedding``).
        """
        ids = check_ids(ids, self.num_embeddings)
        y = F.embedding(
            ids, self.weight, self.padding_idx, scale_grad_by_freq=self.scale_grad_by_freq
        )
        if self.lora_a is not None and self.lora_b is not None:
            a = mp_copy(self.lora_a, group=self.group).t()
            after_a = F.embedding(
                ids, a, self.padding_idx, scale_grad_by_freq=self.scale_grad_by_freq
            )
            y = y + F.linear(after_a, self.lora_b) * self.lora_scaling
        # contiguous as torch.cat gives (mp_gather returns a moved-dim view): a strided output
        # would make a later sum reduce in another order than nn.Embedding's (fairscale's test)
        y = mp_gather(y, -1, self.group).contiguous()
        if self.sequence_parallel:
            y = mp_scatter(y, self.sequence_dim, self.group)
        return y

    @property
    def master_weight(self) -> torch.Tensor:
        """The full ``(num_embeddings, embedding_dim)`` table (a differentiable collective).

        Its gradient flows back into this rank's features of ``weight``.
        """
        return gather_master(self.weight, 1, 1, self.group)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, tp={self.tp}"


class VocabParallelEmbedding(nn.Module):
    """``nn.Embedding`` with the rows (vocabulary) split across ``group``.

    Rank ``r`` holds rows ``[r * V / tp, (r + 1) * V / tp)`` as ``weight``
    ``(num_embeddings / tp, embedding_dim)``; it looks up the ids inside its shard, zeroes the
    others and all-reduces (or, with ``sequence_parallel``, reduce-scatters ``sequence_dim``).
    Ids must lie in ``[0, num_embeddings)``; others raise :class:`IdOutOfRangeError` (an
    ``IndexError``, as in ``nn.Embedding``) before any collective.

    >>> import torch
    >>> from topology_torch.ops import _SingleRank
    >>> VocabParallelEmbedding(10, 4, group=_SingleRank())(torch.tensor([3])).shape
    torch.Size([1, 4])
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        init_type: Initializer = "xavier_normal",
        group: Any = None,
        *,
        sequence_parallel: bool = False,
        sequence_dim: int = 0,
        device: Any = None,
        dtype: Any = None,
        init_method: InitMethod | None = None,
        keep_master_weight_for_test: bool = False,
    ) -> None:
        super().__init__()
        check_size("num_embeddings", num_embeddings)
        check_size("embedding_dim", embedding_dim)
        init = choose_init(init_type, init_method)
        _check_embedding_options(max_norm, norm_type, sparse)
        self.scale_grad_by_freq = check_flag("scale_grad_by_freq", scale_grad_by_freq)
        self.keep_master_weight_for_test = check_flag(
            "keep_master_weight_for_test", keep_master_weight_for_test
        )
        self.padding_idx = _check_padding(padding_idx, num_embeddings)
        self.sequence_parallel = check_flag("sequence_parallel", sequence_parallel)
        self.sequence_dim = check_int("sequence_dim", sequence_dim)
        kw = factory_kwargs(device, dtype)
        self.group = resolve_group(group)
        self.tp = group_size(self.group)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        local = local_size("num_embeddings", num_embeddings, self.tp, 1)
        self.vocab_start = group_rank(self.group) * local
        self.vocab_end = self.vocab_start + local
        self.init_type = init
        self.weight = nn.Parameter(torch.empty(local, embedding_dim, **kw))
        initialize_model_parallel_affine_weight_(
            self.weight, num_embeddings, embedding_dim, local, 0, init, 1, self.group
        )
        self.local_padding_idx: int | None = None
        if self.padding_idx is not None and self.vocab_start <= self.padding_idx < self.vocab_end:
            self.local_padding_idx = self.padding_idx - self.vocab_start
            with torch.no_grad():
                self.weight[self.local_padding_idx].zero_()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Embed integer ``ids`` (replicated on the group) into ``(*ids.shape, embedding_dim)``.

        Raises:
            IdOutOfRangeError: an id outside ``[0, num_embeddings)`` (as ``nn.Embedding``), at
                every tp: no id silently embeds to zeros.
        """
        ids = check_ids(ids, self.num_embeddings)
        if self.tp == 1:
            return F.embedding(
                ids, self.weight, self.local_padding_idx, scale_grad_by_freq=self.scale_grad_by_freq
            )
        outside = (ids < self.vocab_start) | (ids >= self.vocab_end)
        local = (ids - self.vocab_start).masked_fill(outside, 0)
        y = F.embedding(local, self.weight, self.local_padding_idx)
        if self.scale_grad_by_freq and y.requires_grad:
            # count over all ids (replicated), not the local ones: masked ids all map to row 0
            count = torch.bincount(ids.flatten(), minlength=self.num_embeddings)[ids]
            scale = (1.0 / count.to(y.dtype)).unsqueeze(-1)
            y.register_hook(lambda grad: grad * scale)
        y = y.masked_fill(outside.unsqueeze(-1), 0)
        if self.sequence_parallel:
            return sp_scatter(y, self.sequence_dim, self.group)
        return mp_reduce(y, group=self.group)

    @property
    def master_weight(self) -> torch.Tensor:
        """The full ``(num_embeddings, embedding_dim)`` table (a differentiable collective)."""
        return gather_master(self.weight, 0, 1, self.group)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, tp={self.tp}"
