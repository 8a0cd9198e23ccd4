"""Megatron-core's ``RankGenerator`` and ``generate_masked_orthogonal_rank_groups``, computed by
:class:`topology.Grid` (private; re-exported by :mod:`topology_torch.compat.megatron`).

Same signatures, attributes and results as Megatron-core 0.16.1; the groups come from the core's
shape:stride algebra instead of Megatron's decompose loop.

>>> RankGenerator(tp=2, ep=1, dp=2, pp=2, cp=1, order="tp-dp-pp").get_ranks("dp")
[[0, 2], [1, 3], [4, 6], [5, 7]]
>>> generate_masked_orthogonal_rank_groups(8, [2, 2, 2], [False, True, True])
[[0, 2, 4, 6], [1, 3, 5, 7]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from topology import Grid, TopologyError

from .._errors import FacadeAssertionError, FacadeRuntimeError

__all__ = ["RankGenerator", "generate_masked_orthogonal_rank_groups"]


def generate_masked_orthogonal_rank_groups(
    world_size: int, parallel_size: Sequence[int], mask: Sequence[bool]
) -> list[list[int]]:
    """The groups along the masked axes of a grid of ``parallel_size`` (innermost first).

    Algorithm: with axes ``a0`` (fastest) ... ``an`` and ``global_rank = sum(idx[i] *
    prod(parallel_size[:i]))``, one group fixes every unmasked index and varies the masked ones;
    groups are numbered by the unmasked indices (innermost fastest). This is
    ``Grid.from_order("a0-...-an", ...).groups(*masked)``; Megatron returns the first
    ``world_size // group_size`` of them.

    >>> generate_masked_orthogonal_rank_groups(24, [2, 3, 4], [False, True, False])[7]
    [19, 21, 23]

    Raises:
        FacadeAssertionError: ``parallel_size`` and ``mask`` differ in length, or ``world_size``
            holds more groups than the grid (Megatron's decompose assertion).
        TopologyError: a size that is not a positive int.
    """
    sizes = list(parallel_size)
    flags = list(mask)
    if len(sizes) != len(flags):
        raise FacadeAssertionError(
            f"parallel_size {sizes} and mask {flags} must have the same length; "
            "give one flag per axis"
        )
    names = [f"a{i}" for i in range(len(sizes))]
    grid = Grid.from_order("-".join(names), **dict(zip(names, sizes, strict=True)))
    masked = [n for n, flag in zip(names, flags, strict=True) if flag]
    group_size = math.prod(s for s, flag in zip(sizes, flags, strict=True) if flag)
    groups = grid.groups(*masked)
    count = world_size // group_size
    if count > len(groups):
        raise FacadeAssertionError(
            f"world_size {world_size} holds {count} groups of {group_size} ranks but "
            f"parallel_size {sizes} has only {len(groups)}; use world_size "
            f"{math.prod(sizes)} (the product of parallel_size)"
        )
    return [list(groups[i]) for i in range(count)]


class RankGenerator:
    """Megatron's rank generator: groups of any combination of tp, cp, ep, dp and pp (and
    0.19's ``gtp_remat``).

    ``order`` lists axes innermost first; axes of size 1 it omits are appended. Attributes are
    Megatron's (``tp``, ``ep``, ``dp``, ``pp``, ``cp``, ``rank_offset``, ``world_size``,
    ``name_to_size``, ``order``, ``ordered_size``).

    >>> generator = RankGenerator(tp=2, ep=1, dp=2, pp=1, cp=2, order="tp-cp-dp-pp")
    >>> generator.get_ranks("tp-pp")
    [[0, 1], [2, 3], [4, 5], [6, 7]]
    >>> generator.order, generator.ordered_size
    ('tp-cp-dp-pp-ep', [2, 2, 2, 1, 1])

    Raises:
        FacadeAssertionError: both ep and cp are above 1 (Megatron keeps them in separate
            generators).
        FacadeRuntimeError: an axis of size above 1 that ``order`` does not name.
    """

    def __init__(
        self,
        tp: int,
        ep: int,
        dp: int,
        pp: int,
        cp: int,
        order: str,
        rank_offset: int = 0,
        gtp_remat: int = 1,
    ) -> None:
        if ep != 1 and cp != 1:
            raise FacadeAssertionError(
                f"ep({ep}) and cp({cp}) are both above 1; CP belongs to the dense RankGenerator "
                "and EP to the expert one, so give one of them size 1"
            )
        self.tp = tp
        self.ep = ep
        self.dp = dp
        self.pp = pp
        self.cp = cp
        self.gtp_remat = gtp_remat
        self.rank_offset = rank_offset
        self.world_size = tp * dp * pp * cp * ep * gtp_remat
        self.name_to_size = {"tp": tp, "pp": pp, "dp": dp, "ep": ep, "cp": cp}
        given = order
        order = order.lower()
        tokens = order.split("-")
        if gtp_remat != 1 or "gtp_remat" in tokens:  # 0.19's axis; 0.16's order without it
            self.name_to_size["gtp_remat"] = gtp_remat
        for name, size in self.name_to_size.items():
            if name in tokens:
                continue
            if size != 1:
                raise FacadeRuntimeError(
                    f"{name}({size}) is above 1 but order {given!r} does not name it; "
                    f"add {name!r} to the order"
                )
            order = f"{order}-{name}"
        self.order = order
        unknown = [t for t in order.split("-") if t not in self.name_to_size]
        if unknown:
            raise TopologyError(
                f"order {given!r} names unknown axis {unknown[0]!r}; "
                "use tp, cp, ep, dp, pp and gtp_remat"
            )
        self.ordered_size = [self.name_to_size[t] for t in order.split("-")]
        self._grid = Grid.from_order(order, rank_offset=rank_offset, **self.name_to_size)

    def get_mask(self, order: str, token: str) -> list[bool]:
        """One flag per axis of ``order``: whether ``token`` (``'tp-dp'``) names it.

        Raises:
            TopologyError: ``token`` names an axis ``order`` lacks (a ValueError, as Megatron's).
        """
        ordered = order.split("-")
        mask = [False] * len(ordered)
        for name in token.split("-"):
            if name not in ordered:
                raise TopologyError(
                    f"token {token!r} names {name!r}, which order {order!r} lacks; "
                    f"use axes of {ordered}"
                )
            mask[ordered.index(name)] = True
        return mask

    def get_ranks(self, token: str) -> list[list[int]]:
        """The groups varying along the axes of ``token`` (``'tp-dp'``), in Megatron's order."""
        mask = self.get_mask(self.order, token)
        axes = [a for a, flag in zip(self.order.split("-"), mask, strict=True) if flag]
        return [list(group) for group in self._grid.groups(*axes)]

    def get_gtp_ranks(self, gtp_remat_size: int) -> list[list[int]]:
        """Megatron 0.19's GTP weight-sharding groups (singletons when ``gtp_remat_size`` is 1).

        Raises:
            FacadeAssertionError: ``gtp_remat_size`` is not this generator's ``gtp_remat``.
        """
        if gtp_remat_size != self.gtp_remat:
            raise FacadeAssertionError(
                f"gtp_remat axis size ({self.gtp_remat}) != requested gtp_remat_size "
                f"({gtp_remat_size}); ask for the generator's own size"
            )
        if "gtp_remat" not in self.name_to_size:
            return [[r + self.rank_offset] for r in range(self.world_size)]
        return self.get_ranks("gtp_remat")

    def __repr__(self) -> str:
        return f"RankGenerator({self._grid})"
