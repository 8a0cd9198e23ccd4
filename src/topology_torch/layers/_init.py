"""Initialise a full master weight from one seed and keep this rank's (strided) slice of it.

Every master is drawn on the CPU from its global generator (seed every rank equally with
``torch.manual_seed``), in fp32, whatever device the layer lives on; only this rank's slice,
cast to the layer's dtype on the CPU, is copied to the layer's device. So a layer at tp = t
costs its shard on an accelerator during construction (never the full master), and its shards
are the slices of the master ``torch.nn`` draws on the CPU from the same seed, on every device.
A ``meta`` weight has no values: its master is drawn on ``meta`` (no time, no generator draw).
This is Megatron's ``use_cpu_initialization`` rule and fairscale's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, get_args

import torch
from torch import nn

from topology import TopologyError

from .._debug_checks import show as _show
from ..ops import group_rank, group_size, mp_gather, resolve_group
from ._args import check_size

__all__ = [
    "INIT_TYPES",
    "InitMethod",
    "InitType",
    "Initializer",
    "choose_init",
    "draw_device",
    "gather_master",
    "init_master_",
    "initialize_affine_weight",
    "initialize_model_parallel_affine_weight_",
    "new_master",
    "shard",
    "to_master_order",
    "to_param",
    "to_rank_order",
]

InitType = Literal[
    "orthogonal",
    "normal",
    "biased_normal",
    "uniform",
    "kaiming_uniform",
    "kaiming_normal",
    "xavier_uniform",
    "xavier_normal",
    "trunc_normal",
    "dirac",
    "constant",
    "zeros",
    "ones",
]
INIT_TYPES: tuple[InitType, ...] = get_args(InitType)
InitMethod = Callable[[torch.Tensor], Any]
"""A function that fills a tensor in place, like ``torch.nn.init.normal_`` (fairscale's style)."""
Initializer = InitType | InitMethod
"""An initialisation: one of :data:`INIT_TYPES` or an :data:`InitMethod`."""

STD = 0.02
CONSTANT = 0.1


def check_init_type(init_type: object) -> None:
    """Raise :class:`TopologyError` unless ``init_type`` is in :data:`INIT_TYPES` or callable."""
    if callable(init_type) and not isinstance(init_type, (str, type)):
        return
    if type(init_type) is not str or init_type not in INIT_TYPES:
        raise TopologyError(
            f"init_type({_show(init_type)}) is not an initialisation type; use one of "
            f"{', '.join(INIT_TYPES)}, or a function such as torch.nn.init.normal_"
        )


def choose_init(init_type: object, init_method: object) -> Initializer:
    """The initialisation a layer uses: ``init_method`` (fairscale's keyword) or ``init_type``.

    >>> from torch import nn
    >>> choose_init("normal", None), choose_init("xavier_normal", nn.init.zeros_).__name__
    ('normal', 'zeros_')

    Raises:
        TopologyError: both are given (a non-default ``init_type`` and an ``init_method``), or
            ``init_method`` is not callable.
    """
    if init_method is None:
        check_init_type(init_type)
        return init_type  # type: ignore[return-value]
    if not callable(init_method) or isinstance(init_method, (str, type)):
        raise TopologyError(
            f"init_method({_show(init_method)}) must be a function that fills a tensor in "
            "place, such as torch.nn.init.normal_; pass init_type= for a named initialisation"
        )
    if init_type != "xavier_normal":
        raise TopologyError(
            f"init_type({_show(init_type)}) and init_method({_show(init_method)}) were both "
            "given; pass only one of them"
        )
    return init_method  # type: ignore[return-value]


def draw_device(like: torch.Tensor) -> torch.device:
    """Where the master of a parameter like ``like`` is drawn: the CPU, or ``meta`` for a meta one.

    >>> import torch
    >>> draw_device(torch.empty(2, device="meta")).type, draw_device(torch.empty(2)).type
    ('meta', 'cpu')
    """
    return like.device if like.device.type == "meta" else torch.device("cpu")


def new_master(*shape: int, like: torch.Tensor) -> torch.Tensor:
    """An uninitialised fp32 master of ``shape`` for a parameter like ``like`` (see the module).

    >>> import torch
    >>> new_master(2, 3, like=torch.empty(1, dtype=torch.bfloat16)).dtype
    torch.float32
    """
    return torch.empty(*shape, dtype=torch.float32, device=draw_device(like))


def to_param(local: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``local`` (a slice of a master) cast to ``like``'s dtype on its own device, contiguous.

    The cast happens before the copy to ``like``'s device, so that device never holds fp32.
    """
    return local.to(dtype=like.dtype).contiguous()


def init_master_(master: torch.Tensor, init_type: Initializer) -> torch.Tensor:
    """Initialise a full 2-d ``(out, in)`` ``master`` in place with ``init_type`` and return it.

    A callable ``init_type`` is called on ``master`` (as fairscale's ``init_method``). ``normal``
    and ``biased_normal`` draw N(0, 0.02²), ``trunc_normal`` the same cut at ±2σ,
    ``uniform`` U(-1/√in, 1/√in) (the bound of ``nn.Linear``), ``dirac`` the identity matrix,
    ``constant`` 0.1; the others are the ``torch.nn.init`` functions of the same name with their
    defaults.

    >>> import torch
    >>> init_master_(torch.empty(2, 3), "ones").sum().item()
    6.0
    """
    check_init_type(init_type)
    with torch.no_grad():
        if not isinstance(init_type, str):
            init_type(master)
        elif init_type == "orthogonal":
            nn.init.orthogonal_(master)
        elif init_type in ("normal", "biased_normal"):
            nn.init.normal_(master, std=STD)
        elif init_type == "trunc_normal":
            nn.init.trunc_normal_(master, std=STD, a=-2 * STD, b=2 * STD)
        elif init_type == "uniform":
            bound = 1 / math.sqrt(master.shape[-1])
            nn.init.uniform_(master, -bound, bound)
        elif init_type == "kaiming_uniform":
            nn.init.kaiming_uniform_(master)
        elif init_type == "kaiming_normal":
            nn.init.kaiming_normal_(master)
        elif init_type == "xavier_uniform":
            nn.init.xavier_uniform_(master)
        elif init_type == "xavier_normal":
            nn.init.xavier_normal_(master)
        elif init_type == "dirac":
            nn.init.eye_(master)
        elif init_type == "constant":
            nn.init.constant_(master, CONSTANT)
        elif init_type == "zeros":
            nn.init.zeros_(master)
        else:
            nn.init.ones_(master)
    return master


def _chunk(n: int, dim: int, size: int, stride: int, what: str) -> int:
    if n % (size * stride):
        raise TopologyError(
            f"{what} needs dim {dim} ({n}) divisible by stride({stride}) * group size({size}) = "
            f"{stride * size}, but {n} % {stride * size} = {n % (stride * size)}; "
            f"choose sizes that are multiples of {stride * size}"
        )
    return n // (size * stride)


def shard(master: torch.Tensor, dim: int, size: int, rank: int, stride: int = 1) -> torch.Tensor:
    """This rank's slice of ``master`` along ``dim``: chunks ``rank, rank + size, ...``.

    Algorithm: cut ``dim`` into ``stride * size`` equal chunks; rank ``r`` keeps chunks
    ``r + j * size`` for ``j < stride``, concatenated in order.

    >>> import torch
    >>> shard(torch.arange(8), 0, size=2, rank=1, stride=2).tolist()
    [2, 3, 6, 7]
    """
    c = _chunk(master.shape[dim], dim, size, stride, "shard")
    parts = [master.narrow(dim, (j * size + rank) * c, c) for j in range(stride)]
    return parts[0] if stride == 1 else torch.cat(parts, dim)


def to_rank_order(x: torch.Tensor, dim: int, size: int, stride: int) -> torch.Tensor:
    """Permute ``dim`` of a master-ordered ``x`` so that rank ``r``'s shard is block ``r``.

    >>> import torch
    >>> to_rank_order(torch.arange(8), 0, size=2, stride=2).tolist()
    [0, 1, 4, 5, 2, 3, 6, 7]
    """
    if stride == 1 or size == 1:
        return x
    return torch.cat([shard(x, dim, size, r, stride) for r in range(size)], dim)


def to_master_order(x: torch.Tensor, dim: int, size: int, stride: int) -> torch.Tensor:
    """Inverse of :func:`to_rank_order`: rank blocks concatenated back into master order.

    >>> import torch
    >>> to_master_order(torch.tensor([0, 1, 4, 5, 2, 3, 6, 7]), 0, size=2, stride=2).tolist()
    [0, 1, 2, 3, 4, 5, 6, 7]
    """
    if stride == 1 or size == 1:
        return x
    c = _chunk(x.shape[dim], dim, size, stride, "to_master_order")
    parts = [x.narrow(dim, (r * stride + j) * c, c) for j in range(stride) for r in range(size)]
    return torch.cat(parts, dim)


def gather_master(
    local: torch.Tensor, dim: int, stride: int = 1, group: Any = None
) -> torch.Tensor:
    """All-gather the shards ``local`` along ``dim`` into the full master tensor, differentiably.

    The master is a new tensor (never ``local`` itself). Its gradient flows back to this rank's
    shard: each rank keeps its own slice of the master's gradient, without a reduction, so a
    model computed from master weights on every rank backpropagates into the sharded parameters
    exactly as the parallel model does (ml-starter's ``master_weight``).

    SPMD contract: call on every rank of ``group``, in the same order.
    """
    group = resolve_group(group)
    size = group_size(group)
    if size == 1:
        return local.clone()
    return to_master_order(mp_gather(local, dim, group), dim, size, stride)


def _check_weight(weight: object, master: tuple[int, int], dim: int, part: int) -> None:
    want = (part, master[1]) if dim == 0 else (master[0], part)
    if not isinstance(weight, torch.Tensor) or not weight.is_floating_point():
        raise TopologyError(
            f"weight({_show(weight)}) must be a floating torch.Tensor of shape {want}"
        )
    if tuple(weight.shape) != want:
        raise TopologyError(
            f"weight has shape {tuple(weight.shape)} but this rank's shard of the {master} "
            f"master along dim {dim} has shape {want}; pass a weight of shape {want}"
        )


def initialize_model_parallel_affine_weight_(
    weight: torch.Tensor,
    out_features: int,
    in_features: int,
    per_partition_size: int,
    partition_dim: int,
    init_type: Initializer = "xavier_normal",
    stride: int = 1,
    group: Any = None,
) -> None:
    """Initialise the full ``(out_features, in_features)`` master weight and copy this rank's slice.

    ``init_type`` is one of :data:`INIT_TYPES` or a function filling a tensor in place (such as
    ``torch.nn.init.normal_``, fairscale's ``init_method``), applied to the whole master.

    Every rank draws the same master from the global CPU generator (seed it equally on every
    rank with ``torch.manual_seed``), in fp32 on the CPU whatever ``weight``'s device, and
    copies only the slice :func:`shard` gives it along ``partition_dim`` (0 for column-, 1 for
    row-parallel), cast to ``weight``'s dtype: ``weight``'s device never holds more than
    ``weight``. A ``meta`` weight draws nothing.

    Raises:
        TopologyError: an unknown ``init_type``, ``per_partition_size`` that is not the master
            size along ``partition_dim`` divided by the group size, a ``weight`` that is not a
            floating tensor of this rank's shard shape, or any argument of the wrong type.

    >>> import torch
    >>> from topology_torch.ops import _SingleRank
    >>> w = torch.empty(4, 3)
    >>> initialize_model_parallel_affine_weight_(w, 4, 3, 4, 0, "ones", group=_SingleRank())
    >>> w.sum().item()
    12.0
    """
    _affine(
        weight,
        out_features,
        in_features,
        per_partition_size,
        partition_dim,
        init_type,
        stride,
        group,
    )


def _affine(
    weight: torch.Tensor,
    out_features: int,
    in_features: int,
    per_partition_size: int,
    partition_dim: int,
    init_type: Initializer,
    stride: int,
    group: Any,
) -> torch.Tensor:
    """:func:`initialize_model_parallel_affine_weight_`, returning the master it drew."""
    check_init_type(init_type)
    for name, value in (
        ("out_features", out_features),
        ("in_features", in_features),
        ("per_partition_size", per_partition_size),
        ("stride", stride),
    ):
        check_size(name, value)
    if type(partition_dim) is not int or partition_dim not in (0, 1):
        raise TopologyError(
            f"partition_dim({_show(partition_dim)}) must be 0 (column) or 1 (row) of the 2-d weight"
        )
    group = resolve_group(group)
    size = group_size(group)
    full = (out_features, in_features)[partition_dim]
    if per_partition_size * size != full:
        raise TopologyError(
            f"per_partition_size({per_partition_size}) * group size({size}) = "
            f"{per_partition_size * size} != {('out', 'in')[partition_dim]}_features({full}); "
            f"pass per_partition_size={full // size} with sizes divisible by {size}"
        )
    _check_weight(weight, (out_features, in_features), partition_dim, per_partition_size)
    master = new_master(out_features, in_features, like=weight)
    init_master_(master, init_type)
    local = shard(master, partition_dim, size, group_rank(group), stride)
    with torch.no_grad():
        weight.copy_(to_param(local, weight))
    return master


def initialize_affine_weight(
    weight: torch.Tensor,
    out_features: int,
    in_features: int,
    per_partition_size: int,
    partition_dim: int,
    init_method: Initializer,
    stride: int = 1,
    return_master_weight: bool = False,
    *,
    group: Any = None,
) -> torch.Tensor | None:
    """fairscale's name and signature for :func:`initialize_model_parallel_affine_weight_`.

    Draws the full master with ``init_method`` (fp32, on the CPU, from the global generator:
    seed every rank equally), copies this rank's slice into ``weight`` and returns the master
    (on the CPU, as fairscale's) when ``return_master_weight`` (else None).
    ``per_partition_size`` is this rank's share of the partitioned dim, as in fairscale.

    >>> import torch
    >>> from topology_torch.ops import _SingleRank
    >>> w = torch.empty(2, 3)
    >>> initialize_affine_weight(w, 2, 3, 2, 0, torch.nn.init.ones_, group=_SingleRank())
    >>> w.sum().item()
    6.0

    Raises:
        TopologyError: as :func:`initialize_model_parallel_affine_weight_`.
    """
    if type(return_master_weight) is not bool:
        raise TopologyError(
            f"return_master_weight({_show(return_master_weight)}) must be True or False"
        )
    master = _affine(
        weight,
        out_features,
        in_features,
        per_partition_size,
        partition_dim,
        init_method,
        stride,
        group,
    )
    return master if return_master_weight else None
