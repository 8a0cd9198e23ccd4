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
    mp_gather,
    mp_reduce,
    mp_scatter,
    resolve_group,
    sp_scatter,
)
from ._args import check_flag, check_int, check_size, factory_kwargs
from ._ids import check_ids
from ._init import (
    InitType,
    check_init_type,
    gather_master,
    initialize_model_parallel_affine_weight_,
)
from ._linear import _divisible

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
        scale_grad_by_freq: bool = False,
        init_type: InitType = "xavier_normal",
        group: Any = None,
        *,
        sequence_parallel: bool = False,
        sequence_dim: int = 0,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        check_size("num_embeddings", num_embeddings)
        check_size("embedding_dim", embedding_dim)
        check_init_type(init_type)
        self.padding_idx = _check_padding(padding_idx, num_embeddings)
        self.scale_grad_by_freq = check_flag("scale_grad_by_freq", scale_grad_by_freq)
        self.sequence_parallel = check_flag("sequence_parallel", sequence_parallel)
        self.sequence_dim = check_int("sequence_dim", sequence_dim)
        kw = factory_kwargs(device, dtype)
        self.group = resolve_group(group)
        self.tp = group_size(self.group)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        local = _divisible("embedding_dim", embedding_dim, self.tp, 1)
        self.weight = nn.Parameter(torch.empty(num_embeddings, local, **kw))
        initialize_model_parallel_affine_weight_(
            self.weight, num_embeddings, embedding_dim, local, 1, init_type, 1, self.group
        )
        if self.padding_idx is not None:
            with torch.no_grad():
                self.weight[self.padding_idx].zero_()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Embed integer ``ids`` (replicated on the group) into ``(*ids.shape, embedding_dim)``.

        Raises:
            IdOutOfRangeError: an id outside ``[0, num_embeddings)`` (as ``nn.Embedding``).
        """
        ids = check_ids(ids, self.num_embeddings)
        y = F.embedding(
            ids, self.weight, self.padding_idx, scale_grad_by_freq=self.scale_grad_by_freq
        )
        y = mp_gather(y, -1, self.group)
        if self.sequence_parallel:
            y = mp_scatter(y, self.sequence_dim, self.group)
        return y

    @property
    def master_weight(self) -> torch.Tensor:
        """The full ``(num_embeddings, embedding_dim)`` table (a collective on ``group``)."""
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
        init_type: InitType = "xavier_normal",
        group: Any = None,
        *,
        sequence_parallel: bool = False,
        sequence_dim: int = 0,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        check_size("num_embeddings", num_embeddings)
        check_size("embedding_dim", embedding_dim)
        check_init_type(init_type)
        self.padding_idx = _check_padding(padding_idx, num_embeddings)
        self.sequence_parallel = check_flag("sequence_parallel", sequence_parallel)
        self.sequence_dim = check_int("sequence_dim", sequence_dim)
        kw = factory_kwargs(device, dtype)
        self.group = resolve_group(group)
        self.tp = group_size(self.group)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        local = _divisible("num_embeddings", num_embeddings, self.tp, 1)
        self.vocab_start = group_rank(self.group) * local
        self.vocab_end = self.vocab_start + local
        self.weight = nn.Parameter(torch.empty(local, embedding_dim, **kw))
        initialize_model_parallel_affine_weight_(
            self.weight, num_embeddings, embedding_dim, local, 0, init_type, 1, self.group
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
            return F.embedding(ids, self.weight, self.local_padding_idx)
        outside = (ids < self.vocab_start) | (ids >= self.vocab_end)
        local = (ids - self.vocab_start).masked_fill(outside, 0)
        y = F.embedding(local, self.weight, self.local_padding_idx)
        y = y.masked_fill(outside.unsqueeze(-1), 0)
        if self.sequence_parallel:
            return sp_scatter(y, self.sequence_dim, self.group)
        return mp_reduce(y, group=self.group)

    @property
    def master_weight(self) -> torch.Tensor:
        """The full ``(num_embeddings, embedding_dim)`` table (a collective on ``group``)."""
        return gather_master(self.weight, 0, 1, self.group)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, tp={self.tp}"
