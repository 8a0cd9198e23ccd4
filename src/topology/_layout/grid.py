"""Grid: an orthogonal layout of named axes over a contiguous range of ranks."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from .._args import MAX_WORLD_SIZE, check_index, check_size, show
from .._errors import TopologyError
from .groups import OrthogonalGroups
from .runs import compress, index_of, offsets, project

__all__ = ["Grid", "axis_indices", "check_rank"]


def _check_axes(axes: object) -> tuple[str, ...]:
    if not isinstance(axes, tuple) or not axes:
        raise TopologyError(
            f"axes must be a non-empty tuple of names like ('dp', 'tp'), got {show(axes)}"
        )
    for name in axes:
        if not isinstance(name, str) or not name or "-" in name or not name.isprintable():
            raise TopologyError(
                f"axis name {show(name)} is not valid; use a non-empty string without '-', "
                "e.g. 'tp'"
            )
    seen: set[str] = set()
    for name in axes:
        if name in seen:
            raise TopologyError(
                f"axis {show(name)} appears twice in {show(axes)}; name each axis once"
            )
        seen.add(name)
    return axes


def _as_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


@attrs.frozen(repr=False)
class Grid:
    """An orthogonal layout of named axes over ``range(rank_offset, rank_offset + world_size)``.

    ``axes`` and ``shape`` list the axes **outermost first** (row-major: the last axis varies
    fastest), like ``torch.arange(world_size).view(shape)``. A rank is
    ``rank_offset + sum(coord[a] * stride[a])``.

    Algorithm: the groups along a set of axes fix every other axis's coordinate; the ranks inside
    one group are numbered by the chosen axes' coordinates as a mixed-radix number, innermost
    fastest, and the groups by the other axes' coordinates the same way. This is Megatron's
    ``generate_masked_orthogonal_rank_groups``: for sizes [tp, dp, pp] = [2, 3, 4] (tp fastest)
    the dp groups are ``[0, 2, 4], [1, 3, 5], [6, 8, 10], ..., [19, 21, 23]``.

    >>> grid = Grid.from_order("tp-dp-pp", tp=2, dp=3, pp=4)
    >>> grid.axes, grid.shape, grid.strides
    (('pp', 'dp', 'tp'), (4, 3, 2), (6, 2, 1))
    >>> grid.groups("dp")[7]
    (19, 21, 23)
    >>> grid.group_of(9, "tp", "dp")
    (6, 7, 8, 9, 10, 11)
    >>> dict(grid.coord(9))
    {'pp': 1, 'dp': 1, 'tp': 1}
    >>> str(grid)
    'tp2·dp3·pp4 (tp fastest)'
    """

    axes: tuple[str, ...] = attrs.field(converter=_as_tuple)
    shape: tuple[int, ...] = attrs.field(converter=_as_tuple)
    rank_offset: int = 0
    _strides: tuple[int, ...] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        _check_axes(self.axes)
        if not isinstance(self.shape, tuple):
            raise TopologyError(
                f"shape must be a tuple of sizes, one per axis of {self.axes!r}, "
                f"got {show(self.shape)}"
            )
        if len(self.shape) != len(self.axes):
            raise TopologyError(
                f"shape {show(self.shape)} has {len(self.shape)} sizes but axes {self.axes!r} "
                f"name {len(self.axes)}; give one size per axis"
            )
        for name, size in zip(self.axes, self.shape, strict=True):
            check_size(name, size)
        world = 1
        for size in self.shape:
            world *= size
        if world > MAX_WORLD_SIZE:
            raise TopologyError(
                f"this grid has {show(world)} ranks, more than {MAX_WORLD_SIZE} (2**40), the most "
                "rank-topology lays out; use smaller sizes"
            )
        check_index("rank_offset", self.rank_offset)
        strides: list[int] = []
        step = 1
        for size in reversed(self.shape):
            strides.append(step)
            step *= size
        object.__setattr__(self, "_strides", tuple(reversed(strides)))

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_sizes(cls, *, rank_offset: int = 0, **sizes: int) -> Grid:
        """A grid from axis sizes listed **outermost first**.

        >>> Grid.from_sizes(pp=2, dp=2, tp=2).strides
        (4, 2, 1)
        """
        if not sizes:
            raise TopologyError("from_sizes needs at least one axis, e.g. from_sizes(dp=2, tp=4)")
        return cls(tuple(sizes), tuple(sizes.values()), rank_offset)

    @classmethod
    def from_order(cls, order: str, *, rank_offset: int = 0, **sizes: int) -> Grid:
        """A grid from a Megatron order string, listed **innermost first**, and axis sizes.

        >>> Grid.from_order("tp-dp-pp", tp=2, dp=2, pp=2) == Grid.from_sizes(pp=2, dp=2, tp=2)
        True
        """
        if not isinstance(order, str) or not order:
            raise TopologyError(
                f"order must be a non-empty string like 'tp-dp-pp', got {show(order)}"
            )
        tokens = tuple(order.split("-"))
        for token in tokens:
            if token not in sizes:
                raise TopologyError(
                    f"order {show(order)} names axis {show(token)} but no size was given for it; "
                    f"sizes were given for {tuple(sizes)}"
                )
        if len(set(tokens)) != len(tokens):
            twice = next(t for t in tokens if tokens.count(t) > 1)
            raise TopologyError(
                f"order {show(order)} names {show(twice)} twice; name each axis once"
            )
        missing = [name for name in sizes if name not in tokens]
        if missing:
            raise TopologyError(
                f"order {show(order)} does not place axis {show(missing[0])}; add it to the order"
            )
        return cls(tokens[::-1], tuple(sizes[t] for t in reversed(tokens)), rank_offset)

    # -- facts ----------------------------------------------------------------------------------

    @property
    def strides(self) -> tuple[int, ...]:
        """Rank distance between neighbours along each axis, in ``axes`` order."""
        return self._strides

    def digits(self, *axes: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """``(size, stride)`` of each of ``axes`` and of each other axis, both sorted by stride.

        >>> Grid.from_order("tp-dp-pp", tp=2, dp=3, pp=2).digits("dp")
        ([(3, 2)], [(2, 1), (2, 6)])
        """
        chosen = set(axis_indices(self, axes))
        inner: list[tuple[int, int]] = []
        outer: list[tuple[int, int]] = []
        for index, (size, stride) in enumerate(zip(self.shape, self.strides, strict=True)):
            (inner if index in chosen else outer).append((size, stride))
        return sorted(inner, key=_second), sorted(outer, key=_second)

    @property
    def world_size(self) -> int:
        """How many ranks the grid covers."""
        return self._strides[0] * self.shape[0]

    @property
    def order(self) -> str:
        """The Megatron order string, innermost axis first (``'tp-dp-pp'``)."""
        return "-".join(reversed(self.axes))

    def size(self, *axes: str) -> int:
        """The product of the sizes of ``axes`` (or of one token ``'tp-dp'``).

        >>> Grid.from_sizes(dp=3, tp=2).size("tp-dp")
        6
        """
        total = 1
        for index in axis_indices(self, axes):
            total *= self.shape[index]
        return total

    def coord(self, rank: int) -> Mapping[str, int]:
        """The rank's index along every axis, as an immutable mapping (outermost first)."""
        local = check_rank(self, rank) - self.rank_offset
        return MappingProxyType(
            {
                name: (local // stride) % size
                for name, size, stride in zip(self.axes, self.shape, self._strides, strict=True)
            }
        )

    def rank(self, **coord: int) -> int:
        """The rank at ``coord``; every axis must be given.

        >>> Grid.from_sizes(pp=2, dp=2, tp=2, rank_offset=8).rank(pp=1, dp=0, tp=1)
        13
        """
        unknown = [name for name in coord if name not in self.axes]
        if unknown:
            raise TopologyError(
                f"unknown axis {show(unknown[0])}; this grid has axes {self.axes!r}"
            )
        rank = self.rank_offset
        for name, size, stride in zip(self.axes, self.shape, self._strides, strict=True):
            if name not in coord:
                raise TopologyError(f"rank() needs a coordinate for axis {name!r}")
            value = coord[name]
            if type(value) is not int or not 0 <= value < size:
                raise TopologyError(
                    f"coordinate {name}={show(value)} is out of range; valid: 0 to {size - 1}"
                )
            rank += value * stride
        return rank

    def matching(self, /, **coord: int) -> tuple[int, ...]:
        """Every rank whose coordinates equal ``coord`` on the given axes, ascending.

        Axes left out are free, so ``matching()`` is the whole grid and a full coordinate gives
        one rank. This is DeepSpeed's ``ProcessTopology.filter_match``, whose results also come
        in rank order.

        Algorithm: the fixed axes make a base rank ``rank_offset + sum(coord[a] * stride[a])``;
        the matches are that base plus the group along the free axes, ``group_of(base, *free)``,
        so the cost is the number of matches (they are all built), never the world's.

        >>> grid = Grid.from_sizes(pipe=2, data=2, model=2)
        >>> grid.matching(pipe=0, data=1), grid.matching(data=1, model=1)
        ((2, 3), (3, 7))

        Raises:
            TopologyError: an axis the grid lacks, or a coordinate outside ``0 .. size - 1``.
        """
        base = self.rank_offset
        for name, value in coord.items():
            base += self._check_coordinate(name, value) * self._strides[self.axes.index(name)]
        free = tuple(name for name in self.axes if name not in coord)
        return self.groups(*free).build(base)

    def rank_name(
        self,
        rank: int,
        *,
        omit: tuple[str, ...] = (),
        inner_sep: str = "_",
        outer_sep: str = "-",
    ) -> str:
        """A stable name for ``rank``'s checkpoint shard: each axis and its two-digit coordinate.

        Axes come outermost first, ``omit`` leaves some out (the ones a shard is shared along,
        such as data parallelism), and the pieces read ``f"{axis}{inner_sep}{coord:02d}"`` joined
        by ``outer_sep``: DeepSpeed's ``get_rank_repr`` format. With no axis omitted, distinct ranks
        get distinct names (whatever the separators while coordinates stay below 100, and always
        when neither the separators nor the axis names hold a digit); omitting every axis gives
        ``''``.

        >>> grid = Grid.from_sizes(pipe=2, data=2, model=2)
        >>> grid.rank_name(7), grid.rank_name(7, omit=("pipe", "data"))
        ('pipe_01-data_01-model_01', 'model_01')
        >>> grid.rank_name(5, omit=("data",), inner_sep="", outer_sep=".")
        'pipe01.model01'

        Raises:
            TopologyError: a rank outside the grid, an unknown axis in ``omit``, or a separator
                that is not a string.
        """
        coord = self.coord(rank)
        if not isinstance(omit, tuple):
            raise TopologyError(
                f"omit must be a tuple of axis names like ('dp',), got {show(omit)}"
            )
        skipped = set(axis_indices(self, omit))
        for label, sep in (("inner_sep", inner_sep), ("outer_sep", outer_sep)):
            if not isinstance(sep, str):
                raise TopologyError(
                    f"{label} must be a string like '_', got {show(sep)} ({type(sep).__name__})"
                )
        return outer_sep.join(
            f"{name}{inner_sep}{coord[name]:02d}"
            for index, name in enumerate(self.axes)
            if index not in skipped
        )

    # -- groups ---------------------------------------------------------------------------------

    def groups(self, *axes: str) -> OrthogonalGroups:
        """All groups that vary along exactly ``axes``, lazily, in Megatron's order.

        Every group is ascending and groups come in ascending order of their smallest rank.
        With no axes every rank is a group of its own.

        >>> list(Grid.from_order("tp-pp-dp", tp=2, pp=2, dp=2).groups("dp"))
        [(0, 4), (1, 5), (2, 6), (3, 7)]
        """
        chosen = set(axis_indices(self, axes))
        inner_sizes, inner_strides, outer_sizes, outer_strides = [], [], [], []
        for index in reversed(range(len(self.axes))):
            if index in chosen:
                inner_sizes.append(self.shape[index])
                inner_strides.append(self._strides[index])
            else:
                outer_sizes.append(self.shape[index])
                outer_strides.append(self._strides[index])
        return OrthogonalGroups(
            compress(inner_sizes, inner_strides),
            compress(outer_sizes, outer_strides),
            self.rank_offset,
        )

    def groups_in_axis_order(self, *axes: str) -> list[tuple[int, ...]]:
        """The groups of :meth:`groups` (the same groups, in the same order), each listing its
        ranks by their coordinates on ``axes`` **in the order given, the last axis fastest**.

        :meth:`groups` lists a group's ranks ascending (its axes innermost fastest, whatever
        order they are named in); here the caller's order decides, as in Megatron's
        ``HyperCommGrid._gen_rank_enum``. With no axes every rank is a group of its own. The
        list holds every rank once: O(world size).

        >>> grid = Grid.from_sizes(c=2, b=2, a=2)
        >>> grid.groups_in_axis_order("a", "b")
        [(0, 2, 1, 3), (4, 6, 5, 7)]
        >>> grid.groups_in_axis_order("b", "a") == list(grid.groups("a", "b"))
        True

        Raises:
            TopologyError: an axis the grid lacks, or one named twice.
        """
        indices = axis_indices(self, axes)
        steps = offsets(tuple((self.shape[i], self._strides[i]) for i in reversed(indices)))
        return [tuple(base + step for step in steps) for base in self.groups(*axes).bases()]

    def group_of(self, rank: int, *axes: str) -> tuple[int, ...]:
        """The group along ``axes`` that holds ``rank``; its position there is its coordinate.

        >>> Grid.from_order("tp-dp-pp", tp=2, dp=2, pp=2).group_of(5, "dp", "pp")
        (1, 3, 5, 7)
        """
        local = check_rank(self, rank) - self.rank_offset
        groups = self.groups(*axes)
        _, inner, _ = groups.structure
        return groups.build(rank - project(local, inner))

    def index_in_group(self, rank: int, *axes: str) -> int:
        """The rank's position in its group along ``axes`` (its mixed-radix coordinate).

        >>> Grid.from_order("tp-dp-pp", tp=2, dp=2, pp=2).index_in_group(5, "dp", "pp")
        2
        """
        local = check_rank(self, rank) - self.rank_offset
        _, inner, _ = self.groups(*axes).structure
        return index_of(local, inner)

    # -- helpers --------------------------------------------------------------------------------

    def _check_coordinate(self, name: str, value: object) -> int:
        if name not in self.axes:
            raise TopologyError(f"unknown axis {show(name)}; this grid has axes {self.axes!r}")
        size = self.shape[self.axes.index(name)]
        if type(value) is not int or not 0 <= value < size:
            raise TopologyError(
                f"coordinate {name}={show(value)} is out of range; valid: 0 to {size - 1}"
            )
        return value

    def __str__(self) -> str:
        pairs = zip(reversed(self.axes), reversed(self.shape), strict=True)
        parts = "·".join(f"{name}{size}" for name, size in pairs)
        offset = f" from rank {self.rank_offset}" if self.rank_offset else ""
        return f"{parts} ({self.axes[-1]} fastest){offset}"

    def __repr__(self) -> str:
        sizes = ", ".join(f"{n}={s}" for n, s in zip(self.axes, self.shape, strict=True))
        offset = f", rank_offset={self.rank_offset}" if self.rank_offset else ""
        return f"Grid.from_sizes({sizes}{offset})"


def axis_indices(grid: Grid, axes: tuple[str, ...]) -> list[int]:
    """The positions in ``grid.axes`` of ``axes`` (names, or names joined by ``-``), in order.

    Raises:
        TopologyError: for a non-string, an unknown axis or an axis named twice.

    >>> axis_indices(Grid.from_order("tp-dp-pp", tp=2, dp=3, pp=4), ("dp-tp",))
    [1, 2]
    """
    names: list[str] = []
    for item in axes:
        if not isinstance(item, str):
            raise TopologyError(f"axes must be names like 'tp', got {show(item)}")
        names.extend(item.split("-"))
    indices: list[int] = []
    for name in names:
        if name not in grid.axes:
            raise TopologyError(f"unknown axis {show(name)}; this grid has axes {grid.axes!r}")
        index = grid.axes.index(name)
        if index in indices:
            raise TopologyError(f"axis {show(name)} is named twice in {show('-'.join(names))}")
        indices.append(index)
    return indices


def check_rank(grid: Grid, rank: object) -> int:
    """``rank``, checked to be an int rank of ``grid``.

    Raises:
        TopologyError: for a non-int or a rank outside the grid.

    >>> check_rank(Grid(("tp",), (2,), rank_offset=4), 5)
    5
    """
    if type(rank) is not int:
        raise TopologyError(f"rank must be an int, got {show(rank)} ({type(rank).__name__})")
    if not grid.rank_offset <= rank < grid.rank_offset + grid.world_size:
        raise TopologyError(
            f"rank {show(rank)} is outside this grid; valid ranks: {grid.rank_offset} to "
            f"{grid.rank_offset + grid.world_size - 1}"
        )
    return rank


def _second(pair: tuple[int, int]) -> int:
    return pair[1]
