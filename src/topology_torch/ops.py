"""Autograd collectives for model (tensor) parallelism: each op pairs a forward with its adjoint.

=================  ============================  ================================
op                 forward                       backward
=================  ============================  ================================
``mp_copy``        identity                      all-reduce the gradient
``mp_reduce``      all-reduce                    identity
``mp_scatter``     keep this rank's slice        all-gather the gradient
``mp_gather``      all-gather                    keep this rank's slice
``sp_gather``      all-gather along ``dim``      reduce-scatter along ``dim``
``sp_scatter``     reduce-scatter along ``dim``  all-gather along ``dim``
=================  ============================  ================================

Each is a pure identity (no collective, no copy) on a group of size 1. ``group=None`` means the
``tp`` group of the default :func:`topology_torch.initialize`; otherwise pass one torch process
group, such as ``groups.group("tp")`` of a :class:`~topology_torch.ProcessGroups`. Slices are
contiguous: rank ``r`` of a group of size ``n`` owns ``x.narrow(dim, r * N // n, N // n)``.
Every op needs the same shape and dtype on every rank of the group.

Debug checks: a collective given tensors of different shapes on different ranks does not fail
cleanly (one process may abort while the others receive garbage). With debug checks on, every op
first all-gathers one small record per rank (which op, ``dim``, ``op``, dtype and shape) on the
same group and raises :class:`~topology.TopologyError` on *every* rank when they differ, naming
the rank: ``mp_gather: rank 1 has shape (2, 3) float32 but rank 0 has (2, 4) float32; ...``.
Turn them on for a whole run with the environment variable ``TOPOLOGY_TORCH_DEBUG=1`` (read at
each call; ``0`` or unset is off), or for a block of code with ``with debug_checks():``, which
takes precedence over the variable. The switch must be equal on every rank of a group (the check
is itself a collective). Off, the ops run no extra collective and no host synchronisation.

>>> import torch
>>> from topology_torch.ops import mp_copy
>>> x = torch.ones(2, 3)
>>> mp_copy(x, group=_SingleRank()) is x
True
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from topology import TopologyError

from . import _default
from ._debug_checks import DEBUG_ENV, agree, debug_checks, debug_checks_enabled, show
from ._process_groups import ProcessGroups

__all__ = [
    "DEBUG_ENV",
    "debug_checks",
    "debug_checks_enabled",
    "group_rank",
    "group_size",
    "mp_copy",
    "mp_gather",
    "mp_reduce",
    "mp_scatter",
    "resolve_group",
    "sp_gather",
    "sp_scatter",
]

SUM = dist.ReduceOp.SUM


class _SingleRank:
    """A stand-in group of one rank (used by the doctests; real code passes torch groups)."""


# -- argument checks -------------------------------------------------------------------------


def _check_group(group: object) -> None:
    if isinstance(group, (dist.ProcessGroup, _SingleRank)):
        return
    if type(group) is int and group == dist.GroupMember.NON_GROUP_MEMBER:
        raise TopologyError(
            f"group({group}) is torch's marker for a group this rank is not a member of; "
            "call the op only on the ranks of the group"
        )
    if isinstance(group, ProcessGroups):
        raise TopologyError(
            "group is a ProcessGroups (all the groups of a topology), not one process group; "
            "pass one of its groups, e.g. groups.group('tp')"
        )
    raise TopologyError(
        f"group({show(group)}) has type {type(group).__name__}, not a torch process group; "
        "pass one such as groups.group('tp'), or None for the default's tp group"
    )


def _check_tensor(x: object, what: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TopologyError(
            f"{what} needs x to be a torch.Tensor, but x({show(x)}) has type {type(x).__name__}; "
            "pass a tensor"
        )


def _check_op(op: object, what: str) -> None:
    if not isinstance(op, dist.ReduceOp):
        raise TopologyError(
            f"{what} needs op to be a torch.distributed.ReduceOp, but op({show(op)}) has type "
            f"{type(op).__name__}; pass e.g. torch.distributed.ReduceOp.SUM"
        )


def _check_dim_type(dim: object, what: str) -> None:
    if type(dim) is not int:
        raise TopologyError(
            f"{what} needs dim to be an int, but dim({show(dim)}) has type {type(dim).__name__}; "
            "pass a tensor dim such as -1"
        )


def _dim(x: torch.Tensor, dim: int, what: str) -> int:
    if not -x.dim() <= dim < x.dim():
        raise TopologyError(
            f"dim({dim}) is out of range for a {x.dim()}-d tensor in {what}; "
            f"pass a dim in [{-x.dim()}, {x.dim() - 1}]"
        )
    return dim % x.dim()


def _check_divisible(x: torch.Tensor, dim: int, size: int, what: str) -> None:
    if x.shape[dim] % size:
        raise TopologyError(
            f"{what} needs x.shape[{dim}]({x.shape[dim]}) divisible by the group size({size}), "
            f"but {x.shape[dim]} % {size} = {x.shape[dim] % size}; pad dim {dim} to a multiple "
            f"of {size}"
        )


# -- groups ----------------------------------------------------------------------------------


def resolve_group(group: Any = None) -> Any:
    """Return ``group``, or the default's ``tp`` group when it is ``None``.

    Raises:
        TopologyError: ``group`` is not a torch process group (a :class:`ProcessGroups` is the
            set of all groups: pass ``groups.group("tp")``), or it is ``None`` and
            :func:`topology_torch.initialize` has not run.
    """
    if group is None:
        return _default.current().group("tp")
    _check_group(group)
    return group


def group_size(group: Any = None) -> int:
    """The number of ranks in ``group`` (1 without an initialized ``torch.distributed``)."""
    group = resolve_group(group)
    if isinstance(group, _SingleRank) or not dist.is_initialized():
        return 1
    return int(dist.get_world_size(group))


def group_rank(group: Any = None) -> int:
    """This rank's position in ``group`` (0 without an initialized ``torch.distributed``)."""
    group = resolve_group(group)
    if isinstance(group, _SingleRank) or not dist.is_initialized():
        return 0
    return int(dist.get_rank(group))


def _normal_dim(x: torch.Tensor, dim: int) -> int:
    return dim % x.dim() if -x.dim() <= dim < x.dim() else dim


# -- collectives -----------------------------------------------------------------------------


def _all_reduce(x: torch.Tensor, op: Any, group: Any, site: str | None) -> torch.Tensor:
    """All-reduce a copy of ``x``; ``site`` names the op for the debug check (None: done)."""
    if site is not None:
        agree(x, site, group, op=op)
    out = x.contiguous().clone()
    dist.all_reduce(out, op=op, group=group)
    return out


def _all_gather(x: torch.Tensor, dim: int, size: int, group: Any, site: str | None) -> torch.Tensor:
    """Concatenate every rank's ``x`` along ``dim`` (rank order); ``site`` as in _all_reduce."""
    if site is not None:
        agree(x, site, group, dim=dim)
    moved = x.movedim(dim, 0).contiguous()
    out = moved.new_empty((size * moved.shape[0], *moved.shape[1:]))
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(out, moved, group=group)
    return out.movedim(0, dim)


def _reduce_scatter(
    x: torch.Tensor, dim: int, size: int, op: Any, group: Any, site: str | None
) -> torch.Tensor:
    """Sum ``x`` over the group and keep this rank's slice along ``dim``; ``site`` as above."""
    if site is not None:
        agree(x, site, group, op=op, dim=dim)
    moved = x.movedim(dim, 0).contiguous()
    out = moved.new_empty((moved.shape[0] // size, *moved.shape[1:]))
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    scatter(out, moved, op=op, group=group)
    return out.movedim(0, dim)


def _own_slice(x: torch.Tensor, dim: int, size: int, rank: int) -> torch.Tensor:
    part = x.shape[dim] // size
    return x.narrow(dim, rank * part, part).contiguous()


def _along_dim(
    fn: type[torch.autograd.Function],
    x: torch.Tensor,
    dim: int,
    group: Any,
    what: str,
    *,
    split: bool,
) -> torch.Tensor:
    """Apply a dim-wise collective ``fn``; identity on a group of one (no collective, no copy).

    Ranks agree (debug checks) before the range and divisibility checks, so with debug checks on
    those errors are raised on every rank alike; the forward's collective then skips the check.
    """
    group = resolve_group(group)
    _check_tensor(x, what)
    _check_dim_type(dim, what)
    size = group_size(group)
    if size > 1:
        agree(x, what, group, dim=_normal_dim(x, dim))
    dim = _dim(x, dim, what)
    if size == 1:
        return x
    if split:
        _check_divisible(x, dim, size, what)
    return _apply(fn, x, dim, size, group)


def _apply(fn: type[torch.autograd.Function], *args: Any) -> torch.Tensor:
    result: torch.Tensor = fn.apply(*args)  # type: ignore[no-untyped-call]
    return result


class _Copy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, op: Any, group: Any) -> torch.Tensor:
        ctx.op, ctx.group = op, group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return _all_reduce(grad, ctx.op, ctx.group, "mp_copy backward"), None, None


class _Reduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, op: Any, group: Any) -> torch.Tensor:
        return _all_reduce(x, op, group, None)  # agreed in mp_reduce

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return grad, None, None


class _Scatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int, size: int, group: Any) -> torch.Tensor:
        ctx.dim, ctx.size, ctx.group = dim, size, group
        return _own_slice(x, dim, size, dist.get_rank(group))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        out = _all_gather(grad, ctx.dim, ctx.size, ctx.group, "mp_scatter backward")
        return out, None, None, None


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int, size: int, group: Any) -> torch.Tensor:
        ctx.dim, ctx.size, ctx.group = dim, size, group
        return _all_gather(x, dim, size, group, None)  # agreed in mp_gather

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        rank = dist.get_rank(ctx.group)
        return _own_slice(grad, ctx.dim, ctx.size, rank), None, None, None


class _SequenceGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int, size: int, group: Any) -> torch.Tensor:
        ctx.dim, ctx.size, ctx.group = dim, size, group
        return _all_gather(x, dim, size, group, None)  # agreed in sp_gather

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        site = "sp_gather backward"
        return _reduce_scatter(grad, ctx.dim, ctx.size, SUM, ctx.group, site), None, None, None


class _SequenceScatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int, size: int, group: Any) -> torch.Tensor:
        ctx.dim, ctx.size, ctx.group = dim, size, group
        return _reduce_scatter(x, dim, size, SUM, group, None)  # agreed in sp_scatter

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        out = _all_gather(grad, ctx.dim, ctx.size, ctx.group, "sp_scatter backward")
        return out, None, None, None


# -- public ops ------------------------------------------------------------------------------


def mp_copy(x: torch.Tensor, op: Any = SUM, group: Any = None) -> torch.Tensor:
    """Enter the model-parallel region: identity forward, all-reduce (``op``) of the gradient.

    Args:
        x: any tensor, replicated on the ranks of ``group``.
        op: the ``torch.distributed.ReduceOp`` applied to the gradient.
        group: one torch process group; ``None`` means the default's ``tp`` group.

    Returns:
        ``x`` itself on a group of one rank, otherwise a view of ``x``.

    Raises:
        TopologyError: an argument of the wrong type, or (debug checks) ranks that disagree.

    >>> import torch
    >>> mp_copy(torch.zeros(2), group=_SingleRank()).shape
    torch.Size([2])
    """
    group = resolve_group(group)
    _check_tensor(x, "mp_copy")
    _check_op(op, "mp_copy")
    if group_size(group) == 1:
        return x
    agree(x, "mp_copy", group, op=op)
    return _apply(_Copy, x, op, group)


def mp_reduce(x: torch.Tensor, op: Any = SUM, group: Any = None) -> torch.Tensor:
    """Leave the model-parallel region: all-reduce (``op``) forward, identity backward.

    Args:
        x: this rank's partial result (the same shape and dtype on every rank).
        op: the ``torch.distributed.ReduceOp`` applied in the forward pass.
        group: one torch process group; ``None`` means the default's ``tp`` group.

    Raises:
        TopologyError: an argument of the wrong type, or (debug checks) ranks that disagree.

    >>> import torch
    >>> mp_reduce(torch.ones(2), group=_SingleRank()).tolist()
    [1.0, 1.0]
    """
    group = resolve_group(group)
    _check_tensor(x, "mp_reduce")
    _check_op(op, "mp_reduce")
    if group_size(group) == 1:
        return x
    agree(x, "mp_reduce", group, op=op)
    return _apply(_Reduce, x, op, group)


def mp_scatter(x: torch.Tensor, dim: int = -1, group: Any = None) -> torch.Tensor:
    """Keep this rank's contiguous slice of ``x`` along ``dim``; all-gather the gradient.

    Args:
        x: a tensor replicated on the ranks of ``group``, shape ``(..., N, ...)``.
        dim: the dim to split; ``N`` must be divisible by the group size ``n``.
        group: one torch process group; ``None`` means the default's ``tp`` group.

    Returns:
        Shape ``(..., N // n, ...)``.

    Raises:
        TopologyError: ``N`` is not divisible by ``n``, ``dim`` is out of range, an argument of
            the wrong type, or (debug checks) ranks that disagree.

    >>> import torch
    >>> mp_scatter(torch.ones(2, 4), dim=1, group=_SingleRank()).shape
    torch.Size([2, 4])
    """
    return _along_dim(_Scatter, x, dim, group, "mp_scatter", split=True)


def mp_gather(x: torch.Tensor, dim: int = -1, group: Any = None) -> torch.Tensor:
    """Concatenate every rank's ``x`` along ``dim`` (rank order); keep own slice of the gradient.

    Args:
        x: this rank's slice, shape ``(..., N, ...)``, the same shape on every rank.
        dim: the dim to concatenate.
        group: one torch process group; ``None`` means the default's ``tp`` group.

    Returns:
        Shape ``(..., N * n, ...)``.

    Raises:
        TopologyError: ``dim`` is out of range, an argument of the wrong type, or (debug
            checks) ranks that disagree.

    >>> import torch
    >>> mp_gather(torch.ones(2, 4), dim=0, group=_SingleRank()).shape
    torch.Size([2, 4])
    """
    return _along_dim(_Gather, x, dim, group, "mp_gather", split=False)


def sp_gather(x: torch.Tensor, dim: int = 0, group: Any = None) -> torch.Tensor:
    """Sequence parallelism: all-gather the sequence ``dim`` forward, reduce-scatter it backward.

    Used before a column-parallel layer: every rank's gradient of the full sequence is partial,
    so the backward sums them and hands each rank its own slice.

    >>> import torch
    >>> sp_gather(torch.ones(3, 2), group=_SingleRank()).shape
    torch.Size([3, 2])
    """
    return _along_dim(_SequenceGather, x, dim, group, "sp_gather", split=False)


def sp_scatter(x: torch.Tensor, dim: int = 0, group: Any = None) -> torch.Tensor:
    """Sequence parallelism: reduce-scatter the sequence ``dim`` forward, all-gather backward.

    Used after a row-parallel layer: sums the partial results and keeps this rank's slice.

    Raises:
        TopologyError: ``x.shape[dim]`` is not divisible by the group size.

    >>> import torch
    >>> sp_scatter(torch.ones(4, 2), group=_SingleRank()).shape
    torch.Size([4, 2])
    """
    return _along_dim(_SequenceScatter, x, dim, group, "sp_scatter", split=True)
