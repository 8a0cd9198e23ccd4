"""Cross-rank agreement checks for the collectives of :mod:`topology_torch.ops` (private).

With the switch on (``TOPOLOGY_TORCH_DEBUG=1`` or ``with debug_checks():``) every op first
all-gathers one small record per rank (which op, ``dim``, reduce ``op``, dtype and shape) on its
group and raises :class:`~topology.TopologyError` on every rank when the records differ.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

from topology import TopologyError

__all__ = ["DEBUG_ENV", "agree", "debug_checks", "debug_checks_enabled", "show"]

DEBUG_ENV = "TOPOLOGY_TORCH_DEBUG"
_OFF, _ON = ("", "0", "false", "off", "no"), ("1", "true", "on", "yes")
_debug_override: bool | None = None  # set by ``debug_checks``; None defers to DEBUG_ENV


def show(value: object, limit: int = 60) -> str:
    """A short repr of any value, for error messages."""
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not hide the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@contextmanager
def debug_checks(enabled: bool = True) -> Iterator[None]:
    """Turn the cross-rank shape/dtype checks of every op on (or off) inside the block.

    Overrides ``TOPOLOGY_TORCH_DEBUG`` until the block ends (nested blocks restore the outer
    setting). Enter it on every rank of the groups the block uses.

    >>> with debug_checks():
    ...     debug_checks_enabled()
    True
    """
    global _debug_override
    if type(enabled) is not bool:
        raise TopologyError(f"enabled({show(enabled)}) must be True or False")
    saved, _debug_override = _debug_override, enabled
    try:
        yield
    finally:
        _debug_override = saved


def debug_checks_enabled() -> bool:
    """Whether the ops check that ranks agree: the innermost :func:`debug_checks`, else the env.

    Raises:
        TopologyError: ``TOPOLOGY_TORCH_DEBUG`` holds something other than 0/1 (or off/on).
    """
    if _debug_override is not None:
        return _debug_override
    value = os.environ.get(DEBUG_ENV, "").strip().lower()
    if value in _OFF or value in _ON:
        return value in _ON
    raise TopologyError(
        f"{DEBUG_ENV}({show(value)}) is not a switch; set it to 1 to check that ranks agree "
        "on shapes and dtypes, or 0 (or unset it) for no checks"
    )


_OP_NAMES = ("mp_copy", "mp_reduce", "mp_scatter", "mp_gather", "sp_gather", "sp_scatter")
_SITES = (*_OP_NAMES, *(f"{name} backward" for name in _OP_NAMES), "master_weight")
_OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM")
_DTYPES = tuple(sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str))
_MAX_DIMS = 64  # dims beyond these are compared through numel only
_HEAD = 6  # site, op, dim, dtype, ndim, numel


def _op_code(op: Any) -> int:
    return next((i for i, name in enumerate(_OPS) if op == getattr(dist.ReduceOp, name)), -1)


def _record(x: torch.Tensor, site: str, op: Any, dim: int) -> list[int]:
    shape = list(x.shape[:_MAX_DIMS])
    pad = [-1] * (_MAX_DIMS - len(shape))
    dtype = _DTYPES.index(x.dtype) if x.dtype in _DTYPES else -1
    code = -1 if op is None else _op_code(op)
    return [_SITES.index(site), code, dim, dtype, x.dim(), x.numel(), *shape, *pad]


def _shape_text(row: list[int]) -> str:
    ndim = row[4]
    dims = row[_HEAD : _HEAD + min(ndim, _MAX_DIMS)]
    more = ", ..." if ndim > _MAX_DIMS else ""
    shape = f"({dims[0]},)" if ndim == 1 else f"({', '.join(map(str, dims))}{more})"
    dtype = str(_DTYPES[row[3]]).removeprefix("torch.") if row[3] >= 0 else "an unknown dtype"
    return f"{shape} {dtype}"


def _disagreement(site: str, rows: list[list[int]], ranks: list[int]) -> str | None:
    """The error for the first rank whose record differs from the most common one (or None)."""
    counts = Counter(map(tuple, rows))
    if len(counts) == 1:
        return None
    first = next(row for row in rows if counts[tuple(row)] == max(counts.values()))
    differ = [i for i, row in enumerate(rows) if row != first]
    row, ri, r0 = rows[differ[0]], ranks[differ[0]], ranks[rows.index(first)]
    tail = f" ({len(differ)} of {len(rows)} ranks differ from rank {r0})" if len(differ) > 1 else ""
    if row[0] != first[0]:
        return (
            f"{site}: rank {ri} is in {_SITES[row[0]]} but rank {r0} is in {_SITES[first[0]]}"
            f"{tail}; call the same ops in the same order on every rank of the group"
        )
    if row[1] != first[1]:
        names = [_OPS[c] if c >= 0 else "a custom op" for c in (row[1], first[1])]
        return (
            f"{site}: rank {ri} reduces with {names[0]} but rank {r0} with {names[1]}{tail}; "
            "pass the same op on every rank of the group"
        )
    if row[2] != first[2]:
        return (
            f"{site}: rank {ri} passes dim {row[2]} but rank {r0} passes dim {first[2]}{tail}; "
            "pass the same dim on every rank of the group"
        )
    return (
        f"{site}: rank {ri} has shape {_shape_text(row)} but rank {r0} has "
        f"{_shape_text(first)}{tail}; pass tensors of one shape and dtype on every rank"
    )


def agree(x: torch.Tensor, site: str, group: Any, *, op: Any = None, dim: int = -1) -> None:
    """With debug checks on: all-gather one record per rank and raise on every rank if they differ.

    SPMD contract: call on every rank of ``group`` (size > 1) at the same point.
    """
    if not debug_checks_enabled():
        return
    mine = torch.tensor(_record(x, site, op, dim), dtype=torch.int64, device=x.device)
    size = dist.get_world_size(group)
    table = mine.new_empty(size * mine.numel())
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(table, mine, group=group)
    ranks = [dist.get_global_rank(group, i) for i in range(size)]
    message = _disagreement(site, table.view(size, -1).tolist(), ranks)
    if message is not None:
        raise TopologyError(message)
