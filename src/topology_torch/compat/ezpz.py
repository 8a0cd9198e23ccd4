"""ezpz's (fairscale's) ``tp`` API over a :class:`topology.Topology` (a façade).

Layout ``tp-cp-pp-dp`` (``Topology.ezpz``): ranks vary fastest along tp, then cp, pp and dp,
like ``torch.arange(W).reshape(dp, pp, cp, tp)``. For 16 GPUs with tp = cp = pp = 2 the tp
groups are [0, 1], [2, 3], ..., the cp groups [0, 2], [1, 3], ..., the pp groups [0, 4], [1, 5],
... and the dp groups [0, 8], [1, 9], ... SPMD contract: call ``initialize_tensor_parallel`` and
``destroy_tensor_parallel`` on every rank, with equal arguments, in the same order.

As in ezpz, the groups are made without any cross-rank check (``ProcessGroups.create(...,
agree=False)``): every rank calls ``torch.distributed.new_group`` for every group, and asks torch
only ``is_initialized``, ``get_world_size`` and ``get_rank``. A group of a single rank is made on
first use, by that rank alone.

ezpz's module globals (``_TENSOR_PARALLEL_GROUP``, ``_TENSOR_PARALLEL_RANKS``, and the data,
pipeline and context ones) read this rank's current groups and ranks (None before
initialisation). Assigning one, as ezpz's users and tests do, replaces what every getter answers
for it until ``destroy_tensor_parallel()``, which resets them all.

As in ezpz's current release, ``get_tensor_parallel_rank()`` and
``get_tensor_parallel_world_size()`` answer 0 and 1 before initialisation (every rank is alone in
a trivial tp group), so callers may log them unconditionally; every other getter raises
:class:`NotInitializedError` ("... is not initialized"). Misuse raises
:class:`FacadeAssertionError` (a ``TopologyError`` and the ``AssertionError`` ezpz raises).

>>> get_tensor_parallel_rank(), get_tensor_parallel_world_size()
(0, 1)

>>> divide_and_check_no_remainder(12, 4)
3
>>> [t.shape[-1] for t in split_tensor_along_last_dim(torch.zeros(2, 6), 3)]
[2, 2, 2]
"""

from __future__ import annotations

import sys
import types
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from topology import Topology

from .. import _default
from .._args import check_size
from .._process_groups import ProcessGroups, require_initialized
from ._errors import FacadeAssertionError, NotInitializedError, as_assertion, owned_groups
from ._views import View, group_view, ranks_view

__all__ = [
    "destroy_tensor_parallel",
    "divide_and_check_no_remainder",
    "ensure_divisibility",
    "get_context_parallel_group",
    "get_context_parallel_rank",
    "get_context_parallel_ranks",
    "get_context_parallel_world_size",
    "get_data_parallel_group",
    "get_data_parallel_rank",
    "get_data_parallel_ranks",
    "get_data_parallel_world_size",
    "get_pipeline_parallel_group",
    "get_pipeline_parallel_rank",
    "get_pipeline_parallel_ranks",
    "get_pipeline_parallel_world_size",
    "get_tensor_parallel_group",
    "get_tensor_parallel_rank",
    "get_tensor_parallel_ranks",
    "get_tensor_parallel_src_rank",
    "get_tensor_parallel_world_size",
    "initialize_tensor_parallel",
    "split_tensor_along_last_dim",
    "tensor_parallel_is_initialized",
]


OWNER = _default.Owner("compat.ezpz", "initialize_tensor_parallel()", "destroy_tensor_parallel()")

# our kind -> ezpz's globals holding this rank's group and its global ranks
_NAMES = {
    "tp": ("_TENSOR_PARALLEL_GROUP", "_TENSOR_PARALLEL_RANKS"),
    "dp": ("_DATA_PARALLEL_GROUP", "_DATA_PARALLEL_RANKS"),
    "pp": ("_PIPELINE_PARALLEL_GROUP", "_PIPELINE_PARALLEL_RANKS"),
    "cp": ("_CONTEXT_PARALLEL_GROUP", "_CONTEXT_PARALLEL_GROUP_RANKS"),
}
_GLOBALS: dict[str, View] = {
    name: view(kind)
    for kind, names in _NAMES.items()
    for name, view in zip(names, (group_view, ranks_view), strict=True)
}
_assigned: dict[str, Any] = {}  # ezpz global -> the value assigned to it (wins over our state)


def __getattr__(name: str) -> Any:
    """ezpz's module globals: the value assigned to it, else this rank's group or ranks, else
    None (before initialisation)."""
    view = _GLOBALS.get(name)
    if view is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name in _assigned:
        return _assigned[name]
    return view(_default.held_by(OWNER), {})


class _Module(types.ModuleType):
    """This module, whose ezpz globals can be assigned (and deleted: back to our state)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _GLOBALS:
            _assigned[name] = value
        else:
            super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if name in _GLOBALS:
            _assigned.pop(name, None)
        else:
            super().__delattr__(name)


sys.modules[__name__].__class__ = _Module


def _present(kind: str) -> bool:
    """Whether ezpz's group global of ``kind`` would be set (without making any group)."""
    name = _NAMES[kind][0]
    if name in _assigned:
        return _assigned[name] is not None
    return _default.held_by(OWNER) is not None


def _assignment(kind: str, which: int) -> Any:
    """The value assigned to ezpz's group (``which`` 0) or ranks (1) global of ``kind``."""
    name = _NAMES[kind][which]
    value = _assigned[name]
    if value is None:
        raise NotInitializedError(
            f"compat.ezpz is not initialized: {name} was set to None; call "
            "compat.ezpz.initialize_tensor_parallel() on every rank first"
        )
    return value


def _group(kind: str) -> Any:
    if _NAMES[kind][0] in _assigned:
        return _assignment(kind, 0)
    return _groups().group(kind)


def _ranks(kind: str) -> list[int]:
    if _NAMES[kind][1] in _assigned:
        return list(_assignment(kind, 1))
    return list(_groups().ranks(kind))


def _rank(kind: str) -> int:
    if _NAMES[kind][0] in _assigned:  # ask torch about the assigned group, as ezpz does
        return int(dist.get_rank(group=_assignment(kind, 0)))
    return _groups().rank(kind)


def _size(kind: str) -> int:
    if _NAMES[kind][0] in _assigned:
        return int(dist.get_world_size(group=_assignment(kind, 0)))
    return _groups().size(kind)


def ensure_divisibility(numerator: int, denominator: int) -> None:
    """Raise :class:`FacadeAssertionError` unless ``denominator`` divides ``numerator``.

    >>> try:
    ...     ensure_divisibility(10, 4)
    ... except AssertionError as error:
    ...     print(error)
    10 is not divisible by 4 (10 % 4 = 2); choose a divisor of 10
    """
    as_assertion(lambda: check_size("denominator", denominator))
    if numerator % denominator:
        raise FacadeAssertionError(
            f"{numerator} is not divisible by {denominator} "
            f"({numerator} % {denominator} = {numerator % denominator}); "
            f"choose a divisor of {numerator}"
        )


def divide_and_check_no_remainder(numerator: int, denominator: int) -> int:
    """``numerator // denominator``, raising :class:`FacadeAssertionError` on a remainder."""
    ensure_divisibility(numerator, denominator)
    return numerator // denominator


def split_tensor_along_last_dim(
    tensor: torch.Tensor, num_partitions: int, contiguous_split_chunks: bool = False
) -> tuple[torch.Tensor, ...]:
    """Split ``tensor`` into ``num_partitions`` equal parts along its last dim."""
    size = divide_and_check_no_remainder(tensor.shape[-1], num_partitions)
    parts = torch.split(tensor, size, dim=-1)
    if contiguous_split_chunks:
        return tuple(part.contiguous() for part in parts)
    return tuple(parts)


def initialize_tensor_parallel(
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    context_parallel_size: int = 1,
    tensor_parallel_backend: str | None = None,
    pipeline_parallel_backend: str | None = None,
    context_parallel_backend: str | None = None,
    data_parallel_backend: str | None = None,
    timeout: timedelta | None = None,
) -> None:
    """Create the tp, cp, pp and dp groups of the whole default group.

    Unlike ezpz, a ``tensor_parallel_size`` larger than the world is an error, not clamped.
    SPMD contract: call on every rank, with equal arguments, in the same order.

    Raises:
        FacadeAssertionError: torch.distributed is not initialized, invalid sizes (with the
            arithmetic; on every rank), or already initialized.
    """
    as_assertion(
        lambda: _create(
            tensor_parallel_size,
            pipeline_parallel_size,
            context_parallel_size,
            {
                "tp": tensor_parallel_backend,
                "cp": context_parallel_backend,
                "pp": pipeline_parallel_backend,
                "dp": data_parallel_backend,
            },
            timeout,
        )
    )


def _create(
    tp: int, pp: int, cp: int, backends: dict[str, str | None], timeout: timedelta | None
) -> None:
    # like ezpz: each rank checks by itself (every rank holds the same state and arguments)
    require_initialized("initialize_tensor_parallel")
    held = _default.held_by(OWNER)
    if held is not None:
        raise FacadeAssertionError(
            f"compat.ezpz is already initialized with {held.topology}; "
            "call compat.ezpz.destroy_tensor_parallel() first"
        )
    taken = [name for name, value in _assigned.items() if value is not None]
    if taken:
        raise FacadeAssertionError(
            f"compat.ezpz is already initialized: {', '.join(sorted(taken))} assigned; "
            "call compat.ezpz.destroy_tensor_parallel() first"
        )
    topology = Topology.ezpz(dist.get_world_size(), tp=tp, pp=pp, cp=cp)
    _assigned.clear()  # globals assigned None give way to the new groups, as in ezpz
    # another owner's groups came through the agreement: its refusal (in claim) does too
    _default.claim(
        OWNER,
        topology,
        kinds=("tp", "cp", "pp", "dp"),
        backends=backends,
        timeout=timeout,
        gloo=(),
        agree=False,
    )


def destroy_tensor_parallel() -> None:
    """Reset ezpz's globals and destroy the groups (ezpz only forgot them; these are released);
    a no-op when none.

    Raises:
        FacadeAssertionError: the default groups were made by another façade (left alone).
    """
    _assigned.clear()
    as_assertion(lambda: _default.release(OWNER))


def tensor_parallel_is_initialized() -> bool:
    """Whether the tp, dp, pp and cp groups are set: ``initialize_tensor_parallel`` has run (and
    no destroy since), or all four of ezpz's group globals were assigned groups."""
    return all(_present(kind) for kind in _NAMES)


def _groups() -> ProcessGroups:
    return owned_groups(OWNER)


def get_tensor_parallel_group() -> Any:
    """The tensor-parallel group of this rank."""
    return _group("tp")


def get_tensor_parallel_ranks() -> list[int]:
    """The global ranks of this rank's tensor-parallel group."""
    return _ranks("tp")


def get_tensor_parallel_rank() -> int:
    """This rank's position in its tensor-parallel group; 0 before initialisation."""
    return _rank("tp") if _present("tp") else 0


def get_tensor_parallel_world_size() -> int:
    """tp; 1 before initialisation (the trivial group of this rank alone)."""
    return _size("tp") if _present("tp") else 1


def get_tensor_parallel_src_rank() -> int:
    """The global rank of position 0 in this rank's tensor-parallel group.

    Before initialisation this rank is alone in its group: its own global rank (0 when
    torch.distributed is not initialized either).
    """
    if _NAMES["tp"][0] in _assigned and _present("tp"):
        return int(dist.get_global_rank(_assignment("tp", 0), 0))
    groups = _default.held_by(OWNER)
    if groups is not None:
        return groups.ranks("tp")[0]
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def get_data_parallel_group() -> Any:
    """The data-parallel group of this rank."""
    return _group("dp")


def get_data_parallel_ranks() -> list[int]:
    """The global ranks of this rank's data-parallel group."""
    return _ranks("dp")


def get_data_parallel_rank() -> int:
    """This rank's position in its data-parallel group."""
    return _rank("dp")


def get_data_parallel_world_size() -> int:
    """dp."""
    return _size("dp")


def get_pipeline_parallel_group() -> Any:
    """The pipeline group of this rank."""
    return _group("pp")


def get_pipeline_parallel_ranks() -> list[int]:
    """The global ranks of this rank's pipeline group."""
    return _ranks("pp")


def get_pipeline_parallel_rank() -> int:
    """This rank's pipeline stage."""
    return _rank("pp")


def get_pipeline_parallel_world_size() -> int:
    """pp."""
    return _size("pp")


def get_context_parallel_group() -> Any:
    """The context-parallel group of this rank."""
    return _group("cp")


def get_context_parallel_ranks() -> list[int]:
    """The global ranks of this rank's context-parallel group."""
    return _ranks("cp")


def get_context_parallel_rank() -> int:
    """This rank's position in its context-parallel group."""
    return _rank("cp")


def get_context_parallel_world_size() -> int:
    """cp."""
    return _size("cp")
