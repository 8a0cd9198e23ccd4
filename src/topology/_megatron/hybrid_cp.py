"""Megatron's hybrid (dynamic) context-parallel groups: power-of-two blocks of each dp-cp group.

megatron-core 0.19.2's ``initialize_model_parallel(hybrid_context_parallel=True)`` cuts every
dp-cp group (its ``dp * cp`` ranks, ascending) into consecutive blocks of 2, 4, 8, ... ranks
(``create_hybrid_dp_cp_groups``); dynamic context parallelism then runs each sequence on the
block of the size its length needs (Megatron's dev branch calls it "dynamic"). They are no kind
of the layout: the blocks of one size need not divide the dp-cp group evenly.

Megatron's dev branch (``initialize_model_parallel(dynamic_context_parallel=True,
min_dynamic_context_parallel_size=m)``, its ``create_dynamic_dp_cp_groups``) keeps the powers of
two from ``m`` up, size 1 included where ``m`` is 1 (its default): ``min_size=m`` here. 0.19.2's
``[1:]`` drops size 1: ``min_size=2``, the default.
"""

from __future__ import annotations

from .._args import check_size
from .._errors import TopologyError
from .._layout.groups import DerivedGroups, GroupList
from .topology import Topology

__all__ = ["hybrid_cp_groups", "hybrid_cp_sizes"]


def hybrid_cp_sizes(dp_cp: int, min_size: int = 2) -> tuple[int, ...]:
    """Megatron's block sizes for a dp-cp group of ``dp_cp`` ranks: the powers of two from
    ``min_size`` up to half the largest power of two that fits (0.19.2:
    ``[2**i for i in range(int(log2(n)))][1:]``; dev: ``... if 2**i >= min_cp_size``); the whole
    dp-cp group is the block of size ``dp_cp`` and is not repeated here.

    >>> hybrid_cp_sizes(16), hybrid_cp_sizes(12), hybrid_cp_sizes(2), hybrid_cp_sizes(16, 1)
    ((2, 4, 8), (2, 4), (), (1, 2, 4, 8))
    >>> hybrid_cp_sizes(16, 3), hybrid_cp_sizes(16, 16)
    ((4, 8), ())
    """
    return tuple(2**i for i in range(dp_cp.bit_length() - 1) if 2**i >= min_size)


def hybrid_cp_groups(topology: Topology, *, min_size: int = 2) -> dict[int, GroupList]:
    """Megatron's hybrid (dynamic) context-parallel groups of ``topology``, by block size.

    Size ``s`` (each power of two from ``min_size`` below the largest power of two in
    ``dp * cp``; ``min_size=1`` adds the one-rank blocks of Megatron's dev branch) cuts each
    dp-cp group, in its ascending order, into blocks of ``s`` consecutive members; group ``i``
    of size ``s`` is block ``i % b`` of dp-cp group ``i // b`` (``b`` blocks per dp-cp group),
    as Megatron's ``create_hybrid_dp_cp_groups`` makes them. Where ``s`` does not divide
    ``dp * cp`` the last block of each dp-cp group is shorter, as in Megatron (its
    ``group_size`` is then None). Megatron answers size ``dp * cp`` with the dp-cp group itself.

    Raises:
        TopologyError: ``dp * cp`` is odd (Megatron asserts it is even), or ``min_size`` is not
            a positive int or is above ``dp * cp`` (Megatron's arguments assert it is not).

    >>> from topology import Topology
    >>> groups = hybrid_cp_groups(Topology(16, tp=2, cp=2))
    >>> sorted(groups), list(groups[2])[:5], list(groups[4])[:2]
    ([2, 4], [(0, 2), (4, 6), (8, 10), (12, 14), (1, 3)], [(0, 2, 4, 6), (8, 10, 12, 14)])
    >>> groups[4].index_of_rank(10), groups[4].ranks_of(10)
    (1, (8, 10, 12, 14))
    >>> ones = hybrid_cp_groups(Topology(16, tp=2, cp=2), min_size=1)
    >>> sorted(ones), list(ones[1])[:3]
    ([1, 2, 4], [(0,), (2,), (4,)])
    """
    if not isinstance(topology, Topology):
        raise TopologyError(
            f"topology must be a topology.Topology, got {type(topology).__name__}; build one "
            "with Topology(world_size, tp=..., cp=...)"
        )
    check_size("min_size", min_size)
    dp_cp = topology.size("dp-cp")
    if dp_cp % 2:
        raise TopologyError(
            f"hybrid context parallelism needs an even dp * cp, got dp({topology.dp}) * "
            f"cp({topology.cp}) = {dp_cp}; use an even data-parallel or context-parallel size"
        )
    if min_size > dp_cp:
        raise TopologyError(
            f"min_size({min_size}) is above dp({topology.dp}) * cp({topology.cp}) = {dp_cp}, the "
            f"largest hybrid context-parallel group; use a min_size of at most {dp_cp}"
        )
    return {size: _blocks(topology, dp_cp, size) for size in hybrid_cp_sizes(dp_cp, min_size)}


def _blocks(topology: Topology, dp_cp: int, size: int) -> GroupList:
    """The blocks of ``size`` consecutive members of every dp-cp group, group by group."""
    parents = topology.groups("dp-cp")
    per = -(-dp_cp // size)  # blocks per dp-cp group, the last one shorter where size ∤ dp_cp
    first, last = topology.rank_offset, topology.rank_offset + topology.world_size

    def block(index: int) -> range:
        start = (index % per) * size
        return range(start, min(start + size, dp_cp))

    def index_of(rank: int) -> int | None:
        if not first <= rank < last:
            return None
        parent, position = topology.locate(rank, "dp-cp")
        return parent * per + position // size

    return DerivedGroups(
        len(parents) * per,
        lambda index: parents.ranks(index // per).take(block(index)),
        group_size=size if dp_cp % size == 0 else None,
        index_of=index_of,
    )
