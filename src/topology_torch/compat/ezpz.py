"""ezpz's (fairscale's) ``tp`` API over a :class:`topology.Topology` (a façade).

Layout ``tp-cp-pp-dp`` (``Topology.ezpz``): ranks vary fastest along tp, then cp, pp and dp,
like ``torch.arange(W).reshape(dp, pp, cp, tp)``. For 16 GPUs with tp = cp = pp = 2 the tp
groups are [0, 1], [2, 3], ..., the cp groups [0, 2], [1, 3], ..., the pp groups [0, 4], [1, 5],
... and the dp groups [0, 8], [1, 9], ... SPMD contract: call ``initialize_tensor_parallel`` and
``destroy_tensor_parallel`` on every rank, with equal arguments, in the same order.

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

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from topology import Topology, TopologyError

from .. import _default
from .._process_groups import ProcessGroups, refuse, require_initialized
from ._errors import FacadeAssertionError, NotInitializedError, as_assertion

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


def ensure_divisibility(numerator: int, denominator: int) -> None:
    """Raise :class:`FacadeAssertionError` unless ``denominator`` divides ``numerator``.

    >>> try:
    ...     ensure_divisibility(10, 4)
    ... except AssertionError as error:
    ...     print(error)
    10 is not divisible by 4 (10 % 4 = 2); choose a divisor of 10
    """
    if type(denominator) is not int or denominator < 1:
        raise FacadeAssertionError(f"denominator must be a positive int, got {denominator!r}")
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
    require_initialized("initialize_tensor_parallel")
    try:
        topology = Topology.ezpz(dist.get_world_size(), tp=tp, pp=pp, cp=cp)
    except TopologyError as problem:
        refuse(problem)  # every rank hears of it, nobody waits
    _default.claim(
        OWNER,
        topology,
        kinds=("tp", "cp", "pp", "dp"),
        backends=backends,
        timeout=timeout,
        gloo=(),
    )


def destroy_tensor_parallel() -> None:
    """Destroy the groups (ezpz only forgot them; these are released); a no-op when none.

    Raises:
        FacadeAssertionError: the default groups were made by another façade (left alone).
    """
    as_assertion(lambda: _default.release(OWNER))


def tensor_parallel_is_initialized() -> bool:
    """Whether ``initialize_tensor_parallel`` has run (and no destroy since)."""
    return _default.held_by(OWNER) is not None


def _groups() -> ProcessGroups:
    groups = _default.held_by(OWNER)
    if groups is None:
        try:
            return _default.owned(OWNER)
        except TopologyError as error:
            raise NotInitializedError(str(error)) from None
    return groups


def get_tensor_parallel_group() -> Any:
    """The tensor-parallel group of this rank."""
    return _groups().group("tp")


def get_tensor_parallel_ranks() -> list[int]:
    """The global ranks of this rank's tensor-parallel group."""
    return list(_groups().ranks("tp"))


def get_tensor_parallel_rank() -> int:
    """This rank's position in its tensor-parallel group; 0 before initialisation."""
    groups = _default.held_by(OWNER)
    return 0 if groups is None else groups.rank("tp")


def get_tensor_parallel_world_size() -> int:
    """tp; 1 before initialisation (the trivial group of this rank alone)."""
    groups = _default.held_by(OWNER)
    return 1 if groups is None else groups.size("tp")


def get_tensor_parallel_src_rank() -> int:
    """The global rank of position 0 in this rank's tensor-parallel group.

    Before initialisation this rank is alone in its group: its own global rank (0 when
    torch.distributed is not initialized either).
    """
    groups = _default.held_by(OWNER)
    if groups is not None:
        return groups.ranks("tp")[0]
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def get_data_parallel_group() -> Any:
    """The data-parallel group of this rank."""
    return _groups().group("dp")


def get_data_parallel_ranks() -> list[int]:
    """The global ranks of this rank's data-parallel group."""
    return list(_groups().ranks("dp"))


def get_data_parallel_rank() -> int:
    """This rank's position in its data-parallel group."""
    return _groups().rank("dp")


def get_data_parallel_world_size() -> int:
    """dp."""
    return _groups().size("dp")


def get_pipeline_parallel_group() -> Any:
    """The pipeline group of this rank."""
    return _groups().group("pp")


def get_pipeline_parallel_ranks() -> list[int]:
    """The global ranks of this rank's pipeline group."""
    return list(_groups().ranks("pp"))


def get_pipeline_parallel_rank() -> int:
    """This rank's pipeline stage."""
    return _groups().rank("pp")


def get_pipeline_parallel_world_size() -> int:
    """pp."""
    return _groups().size("pp")


def get_context_parallel_group() -> Any:
    """The context-parallel group of this rank."""
    return _groups().group("cp")


def get_context_parallel_ranks() -> list[int]:
    """The global ranks of this rank's context-parallel group."""
    return list(_groups().ranks("cp"))


def get_context_parallel_rank() -> int:
    """This rank's position in its context-parallel group."""
    return _groups().rank("cp")


def get_context_parallel_world_size() -> int:
    """cp."""
    return _groups().size("cp")
