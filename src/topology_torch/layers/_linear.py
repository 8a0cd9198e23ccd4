"""Column- and row-parallel linear layers (optionally with a model-parallel LoRA adapter)."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from topology import TopologyError

from ..ops import (
    group_rank,
    group_size,
    mp_copy,
    mp_gather,
    mp_reduce,
    mp_scatter,
    resolve_group,
    sp_gather,
    sp_scatter,
)
from ._args import check_flag, check_int, check_size, factory_kwargs
from ._init import (
    Initializer,
    InitMethod,
    choose_init,
    gather_master,
    init_master_,
    initialize_model_parallel_affine_weight_,
    new_master,
    shard,
    to_master_order,
    to_param,
    to_rank_order,
)

__all__ = ["ColumnParallelLinear", "RowParallelLinear"]


def _check_lora(lora_rank: object) -> int | None:
    return None if lora_rank is None else check_size("lora_rank", lora_rank)


def lora_scaling(rank: int, alpha: object) -> float:
    """The factor of the LoRA term: ``alpha / rank``, or 1 when ``alpha`` is None.

    >>> lora_scaling(4, 2.0), lora_scaling(4, None)
    (0.5, 1.0)
    """
    if alpha is None:
        return 1.0
    if type(alpha) not in (int, float) or not math.isfinite(alpha):  # type: ignore[arg-type]
        raise TopologyError(f"lora_alpha({alpha!r}) must be a finite number such as 1.0")
    return float(alpha) / rank  # type: ignore[arg-type]


def local_size(name: str, n: int, size: int, stride: int) -> int:
    """One rank's share ``n / size`` of dim ``name``, which ``stride * size`` must divide."""
    if n % (size * stride):
        raise TopologyError(
            f"{name}({n}) must be divisible by stride({stride}) * tp({size}) = {size * stride}, "
            f"but {n} % {size * stride} = {n % (size * stride)}; use a multiple of "
            f"{size * stride}"
        )
    return n // size


def _init_bias(
    bias: torch.Tensor | None, n: int, dim_size: int, rank: int, stride: int, init_type: object
) -> None:
    """Zero the bias, or (``biased_normal``) draw the full bias N(0, 0.02²) and keep a slice."""
    if bias is None:
        return
    with torch.no_grad():
        if init_type == "biased_normal":
            full = init_master_(new_master(1, n, like=bias), "normal")
            bias.copy_(to_param(shard(full, 1, dim_size, rank, stride)[0], bias))
        else:
            bias.zero_()


def _new_lora_a(
    rank_r: int, in_features: int, size: int, rank: int, stride: int, like: torch.Tensor
) -> nn.Parameter:
    """LoRA A from one full ``(r, in)`` master (kaiming uniform, a=√5), sliced along ``in``."""
    master = new_master(rank_r, in_features, like=like)
    if master.device.type != "meta":
        nn.init.kaiming_uniform_(master, a=math.sqrt(5))
    local = to_param(shard(master, 1, size, rank, stride), like)
    return nn.Parameter(local.to(device=like.device))


def check_no_adapter(layer: nn.Module) -> None:
    """Refuse a second LoRA adapter on ``layer``."""
    if getattr(layer, "lora_a", None) is not None:
        raise TopologyError(
            f"{type(layer).__name__} already has a LoRA adapter of rank {layer.lora_rank}; "
            "add one adapter per layer"
        )


class ColumnParallelLinear(nn.Module):
    """``y = x Wᵀ + b`` with ``W``'s rows (output features) split across the ranks of ``group``.

    Rank ``r`` holds ``weight`` of shape ``(out_features / tp, in_features)`` and ``bias`` of
    shape ``(out_features / tp,)``: with ``stride`` s the out dim is cut into ``s * tp`` chunks
    and rank r keeps chunks ``r, r + tp, ...``. Forward: copy ``x`` in (its gradient is
    all-reduced), or with ``sequence_parallel`` all-gather the sequence dim; multiply; with
    ``gather_output`` all-gather the output features (in master order).

    Args:
        in_features, out_features: the sizes of the full layer.
        bias: whether to add a bias.
        gather_output: return the full output (else this rank's output features).
        init_type: one of the 13 :data:`INIT_TYPES`, or a function filling a tensor in place;
            the master weight is drawn in fp32 on the CPU from the global generator (seed
            every rank equally) and only this rank's slice is copied to ``device``.
        stride: interleave the partition (for fused weights such as QKV).
        lora_rank: add ``B @ A`` (A ``(r, in)`` replicated, B ``(out / tp, r)`` zero at start).
        group: the tp group; ``None`` means ``topology_torch.current().group("tp")``.
        sequence_parallel: the input is split along ``sequence_dim`` across ``group``.
        sequence_dim: the sequence dim of the input (0 for ``(seq, batch, hidden)``).
        init_method: fairscale's keyword: a function such as ``torch.nn.init.normal_`` applied
            to the full master weight (then sliced), instead of ``init_type``.
        keep_master_weight_for_test: accepted for fairscale; :attr:`master_weight` is always
            available (a differentiable gather, the drawn master until the weights change).

    >>> import torch
    >>> from topology_torch.ops import _SingleRank
    >>> layer = ColumnParallelLinear(4, 6, group=_SingleRank())
    >>> layer(torch.ones(2, 4)).shape, layer.master_weight.shape
    (torch.Size([2, 6]), torch.Size([6, 4]))
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        gather_output: bool = True,
        init_type: Initializer = "xavier_normal",
        stride: int = 1,
        lora_rank: int | None = None,
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
        check_size("in_features", in_features)
        check_size("out_features", out_features)
        check_size("stride", stride)
        init = choose_init(init_type, init_method)
        check_flag("keep_master_weight_for_test", keep_master_weight_for_test)
        lora_rank = _check_lora(lora_rank)
        check_flag("bias", bias)
        check_flag("gather_output", gather_output)
        check_flag("sequence_parallel", sequence_parallel)
        check_int("sequence_dim", sequence_dim)
        kw = factory_kwargs(device, dtype)
        if gather_output and sequence_parallel:
            raise TopologyError(
                "gather_output=True with sequence_parallel=True would gather features of a "
                "sequence shard; pass gather_output=False and follow with a RowParallelLinear"
            )
        self.group = resolve_group(group)
        self.tp = group_size(self.group)
        self.tp_rank = group_rank(self.group)
        self.in_features, self.out_features = in_features, out_features
        self.gather_output, self.stride = gather_output, stride
        self.sequence_parallel, self.sequence_dim = sequence_parallel, sequence_dim
        self.init_type = init
        self.keep_master_weight_for_test = keep_master_weight_for_test
        local_out = local_size("out_features", out_features, self.tp, stride)
        self.weight = nn.Parameter(torch.empty(local_out, in_features, **kw))
        self.bias = nn.Parameter(torch.empty(local_out, **kw)) if bias else None
        initialize_model_parallel_affine_weight_(
            self.weight, out_features, in_features, local_out, 0, init, stride, self.group
        )
        _init_bias(self.bias, out_features, self.tp, self.tp_rank, stride, init)
        self.lora_rank: int | None = None
        self.lora_scaling = 1.0
        self.lora_a: nn.Parameter | None = None
        self.lora_b: nn.Parameter | None = None
        if lora_rank is not None:
            self.add_lora_(lora_rank)

    def add_lora_(self, rank: int, alpha: float | None = None) -> ColumnParallelLinear:
        """Add a LoRA adapter ``(alpha / rank) * B @ A`` in place and return the layer.

        A ``(rank, in_features)`` is replicated (one kaiming-uniform master), B
        ``(out_features / tp, rank)`` is split like ``weight`` and zero, so the output is unchanged
        until B trains. ``alpha=None`` scales by 1.

        Raises:
            TopologyError: a bad ``rank`` or ``alpha``, or the layer already has an adapter.
        """
        rank = check_size("lora_rank", rank)
        scaling = lora_scaling(rank, alpha)
        check_no_adapter(self)
        self.lora_a = _new_lora_a(rank, self.in_features, 1, 0, 1, self.weight)
        self.lora_b = nn.Parameter(self.weight.new_zeros(self.weight.shape[0], rank))
        self.lora_rank, self.lora_scaling = rank, scaling
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer to ``x`` of shape ``(..., in_features)``."""
        if self.sequence_parallel:
            x = sp_gather(x, self.sequence_dim, self.group)
        else:
            x = mp_copy(x, group=self.group)
        y = F.linear(x, self.weight, self.bias)
        if self.lora_a is not None and self.lora_b is not None:
            a = mp_copy(self.lora_a, group=self.group)
            y = y + F.linear(F.linear(x, a), self.lora_b) * self.lora_scaling
        if self.gather_output:
            y = to_master_order(mp_gather(y, -1, self.group), -1, self.tp, self.stride)
            y = y.contiguous()  # row-major like nn.Linear's output (mp_gather gives a view)
        return y

    @property
    def master_weight(self) -> torch.Tensor:
        """The full ``(out_features, in_features)`` weight (a differentiable collective).

        Its gradient flows back into this rank's rows of ``weight`` (see ``gather_master``).
        """
        return gather_master(self.weight, 0, self.stride, self.group)

    @property
    def master_bias(self) -> torch.Tensor | None:
        """The full ``(out_features,)`` bias, or ``None`` (a differentiable collective)."""
        if self.bias is None:
            return None
        return gather_master(self.bias, 0, self.stride, self.group)

    def get_master_weight(self) -> torch.Tensor:
        """fairscale's name: :attr:`master_weight`, detached (a collective on ``group``)."""
        return self.master_weight.detach()

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, tp={self.tp}, "
            f"bias={self.bias is not None}, gather_output={self.gather_output}, "
            f"stride={self.stride}, lora_rank={self.lora_rank}, "
            f"sequence_parallel={self.sequence_parallel}"
        )


class RowParallelLinear(nn.Module):
    """``y = x Wᵀ + b`` with ``W``'s columns (input features) split across the ranks of ``group``.

    Rank ``r`` holds ``weight`` of shape ``(out_features, in_features / tp)`` (strided as in
    :class:`ColumnParallelLinear`) and the full, replicated ``bias`` ``(out_features,)``.
    Forward: split ``x``'s features unless ``input_is_parallel``; multiply; all-reduce the partial
    products (or, with ``sequence_parallel``, reduce-scatter the sequence dim); add the bias once.

    Args:
        in_features, out_features: the sizes of the full layer.
        bias: whether to add a bias.
        input_is_parallel: ``x`` already holds this rank's input features (a column layer's
            output with ``gather_output=False``).
        init_type, stride, group, sequence_parallel, sequence_dim, init_method,
            keep_master_weight_for_test: as in :class:`ColumnParallelLinear`.
        lora_rank: add ``B @ A`` (A ``(r, in / tp)`` split like ``weight``, B ``(out, r)``
            replicated and zero at start).

    >>> import torch
    >>> from topology_torch.ops import _SingleRank
    >>> layer = RowParallelLinear(6, 4, group=_SingleRank())
    >>> layer(torch.ones(2, 6)).shape, layer.master_bias.shape
    (torch.Size([2, 4]), torch.Size([4]))
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        input_is_parallel: bool = False,
        init_type: Initializer = "xavier_normal",
        stride: int = 1,
        lora_rank: int | None = None,
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
        check_size("in_features", in_features)
        check_size("out_features", out_features)
        check_size("stride", stride)
        init = choose_init(init_type, init_method)
        check_flag("keep_master_weight_for_test", keep_master_weight_for_test)
        lora_rank = _check_lora(lora_rank)
        check_flag("bias", bias)
        check_flag("input_is_parallel", input_is_parallel)
        check_flag("sequence_parallel", sequence_parallel)
        check_int("sequence_dim", sequence_dim)
        kw = factory_kwargs(device, dtype)
        if sequence_parallel and not input_is_parallel:
            raise TopologyError(
                "sequence_parallel=True needs input_is_parallel=True (the input is a column "
                "layer's feature shard of the full sequence); pass input_is_parallel=True"
            )
        self.group = resolve_group(group)
        self.tp = group_size(self.group)
        self.tp_rank = group_rank(self.group)
        self.in_features, self.out_features = in_features, out_features
        self.input_is_parallel, self.stride = input_is_parallel, stride
        self.sequence_parallel, self.sequence_dim = sequence_parallel, sequence_dim
        self.init_type = init
        self.keep_master_weight_for_test = keep_master_weight_for_test
        local_in = local_size("in_features", in_features, self.tp, stride)
        self.weight = nn.Parameter(torch.empty(out_features, local_in, **kw))
        self.bias = nn.Parameter(torch.empty(out_features, **kw)) if bias else None
        initialize_model_parallel_affine_weight_(
            self.weight, out_features, in_features, local_in, 1, init, stride, self.group
        )
        _init_bias(self.bias, out_features, 1, 0, 1, init)
        self.lora_rank: int | None = None
        self.lora_scaling = 1.0
        self.lora_a: nn.Parameter | None = None
        self.lora_b: nn.Parameter | None = None
        if lora_rank is not None:
            self.add_lora_(lora_rank)

    def add_lora_(self, rank: int, alpha: float | None = None) -> RowParallelLinear:
        """Add a LoRA adapter ``(alpha / rank) * B @ A`` in place and return the layer.

        A ``(rank, in_features / tp)`` is split like ``weight`` (from one kaiming-uniform
        master), B ``(out_features, rank)`` is replicated and zero. ``alpha=None`` scales by 1.

        Raises:
            TopologyError: a bad ``rank`` or ``alpha``, or the layer already has an adapter.
        """
        rank = check_size("lora_rank", rank)
        scaling = lora_scaling(rank, alpha)
        check_no_adapter(self)
        self.lora_a = _new_lora_a(
            rank, self.in_features, self.tp, self.tp_rank, self.stride, self.weight
        )
        self.lora_b = nn.Parameter(self.weight.new_zeros(self.out_features, rank))
        self.lora_rank, self.lora_scaling = rank, scaling
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer to ``x`` of shape ``(..., in_features)`` (``/ tp`` if parallel)."""
        if self.tp == 1 and self.lora_a is None:
            return F.linear(x, self.weight, self.bias)
        if not self.input_is_parallel:
            x = mp_scatter(to_rank_order(x, -1, self.tp, self.stride), -1, self.group)
        y = F.linear(x, self.weight)
        if self.lora_a is not None and self.lora_b is not None:
            b = mp_copy(self.lora_b, group=self.group)
            y = y + F.linear(F.linear(x, self.lora_a), b) * self.lora_scaling
        if self.sequence_parallel:
            y = sp_scatter(y, self.sequence_dim, self.group)
            if self.bias is not None:
                # each rank sees a sequence shard: sum the bias gradient over the group
                y = y + mp_copy(self.bias, group=self.group)
            return y
        y = mp_reduce(y, group=self.group)
        return y if self.bias is None else y + self.bias

    @property
    def master_weight(self) -> torch.Tensor:
        """The full ``(out_features, in_features)`` weight (a differentiable collective).

        Its gradient flows back into this rank's columns of ``weight`` (see ``gather_master``).
        """
        return gather_master(self.weight, 1, self.stride, self.group)

    @property
    def master_bias(self) -> torch.Tensor | None:
        """The full ``(out_features,)`` bias (replicated: a differentiable copy), or ``None``."""
        return None if self.bias is None else self.bias.clone()

    def get_master_weight(self) -> torch.Tensor:
        """fairscale's name: :attr:`master_weight`, detached (a collective on ``group``)."""
        return self.master_weight.detach()

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, tp={self.tp}, "
            f"bias={self.bias is not None}, input_is_parallel={self.input_is_parallel}, "
            f"stride={self.stride}, lora_rank={self.lora_rank}, "
            f"sequence_parallel={self.sequence_parallel}"
        )
