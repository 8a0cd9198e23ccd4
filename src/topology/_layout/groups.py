"""Group sequences: lazy, immutable sequences of rank groups, one public type (private module).

:class:`GroupList` is the type every ``groups(...)`` returns and the API its two implementations
honour. A set of orthogonal groups (:class:`OrthogonalGroups`) is two mixed-radix counters: the
*masked* axes number the ranks inside a group, the *unmasked* axes number the groups. Both are
kept as runs of ``(size, stride)`` (see :mod:`.runs`), innermost first, with size-1 axes dropped
and contiguous axes merged, so that a group is usually one ``range`` and the groups' first ranks
usually one more. Groups that are no set of axes (:class:`DerivedGroups`) are made one at a time
by a function of their index.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from itertools import product
from typing import cast, overload

from .._args import check_index, show
from .._errors import TopologyError
from .ranks import JSON_RANKS, SHOWN_RANKS, Positions, Ranks, checked_index, checked_slice
from .runs import Runs, compress, index_of, offsets, point, project, volume

__all__ = [
    "JSON_RANKS",
    "SHOWN_RANKS",
    "DerivedGroups",
    "GroupList",
    "OrthogonalGroups",
    "Positions",
    "Ranks",
    "Runs",
    "compress",
]


class GroupList(Sequence[tuple[int, ...]]):
    """A lazy, immutable sequence of groups of ranks, each group a tuple of ints.

    Every implementation honours this API:

    - ``len(groups)``; ``groups[i]`` is a tuple (negative ``i`` counts from the end, anything
      else out of range raises :class:`~topology.GroupIndexError`); ``groups[a:b:c]`` is a list
      of tuples; iteration yields the groups in order;
    - ``group in groups`` for a sequence of ints equal to a group (a tuple or a list);
    - ``==`` with any sequence of sequences of ints (a list of lists too); not hashable;
    - ``repr`` shows at most three groups (each a :class:`Ranks`) and the count;
    - ``ranks(i)``: group ``i`` as a lazy :class:`Ranks`;
    - ``index_of_rank(rank)``: the index of the first group that holds ``rank``, or None;
    - ``ranks_of(rank)``: that group as a lazy :class:`Ranks`, or None;
    - ``group_size``: how many ranks each group holds, or None when that is not known without
      listing the groups.

    :class:`OrthogonalGroups` (a grid's groups) answers every query in O(number of axes) and adds
    ``structure``, ``build`` and ``bases``; :class:`DerivedGroups` makes each group on demand.

    >>> groups = OrthogonalGroups(inner=((2, 1),), outer=((3, 2),), offset=0)
    >>> isinstance(groups, GroupList), groups.index_of_rank(3), groups.ranks_of(3)
    (True, 1, (2, 3))
    >>> squares = DerivedGroups(3, lambda i: (i, i * i + 1))
    >>> squares.index_of_rank(5), squares.ranks_of(5), squares.group_size
    (2, (2, 5), None)
    """

    __slots__ = ()

    @abstractmethod
    def _item(self, index: int) -> tuple[int, ...]:
        """Group ``index`` (already checked to be in range) as a tuple."""

    def _lazy(self, index: int) -> Ranks:
        return Ranks.of(self._item(index))

    def _holds(self, index: int, rank: int) -> bool:
        return rank in self._lazy(index)

    @property
    def group_size(self) -> int | None:
        """How many ranks each group holds; None when unknown without listing the groups."""
        return None

    def ranks(self, index: int) -> Ranks:
        """Group ``index`` as a lazy :class:`Ranks` (O(number of runs), nothing enumerated).

        >>> OrthogonalGroups(inner=((1 << 30, 2),), outer=((2, 1),), offset=0).ranks(-1)
        <1073741824 ranks: 1, 3, 5, 7, …, 2147483647>
        """
        return self._lazy(checked_index(index, len(self), "group"))

    def index_of_rank(self, rank: int) -> int | None:
        """Which group holds ``rank`` (the first, if several do); None if none does."""
        if type(rank) is not int:
            return None
        return next((i for i in range(len(self)) if self._holds(i, rank)), None)

    def ranks_of(self, rank: int) -> Ranks | None:
        """The group :meth:`index_of_rank` finds, as a lazy :class:`Ranks` (None if none)."""
        index = self.index_of_rank(rank)
        return None if index is None else self._lazy(index)

    @overload
    def __getitem__(self, index: int) -> tuple[int, ...]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[int, ...]]: ...

    def __getitem__(self, index: int | slice) -> tuple[int, ...] | list[tuple[int, ...]]:
        if isinstance(index, slice):
            return [self._item(i) for i in checked_slice(index, len(self))]
        return self._item(checked_index(index, len(self), "group"))

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        return map(self._item, range(len(self)))

    def __contains__(self, group: object) -> bool:
        """True for a sequence of ints equal to a group (O(world size) unless overridden)."""
        if not isinstance(group, Sequence) or isinstance(group, str) or not group:
            return False
        if any(type(rank) is not int for rank in group):
            return False
        wanted = tuple(group)
        return any(item == wanted for item in self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        if len(self) != len(other):
            return False
        return all(
            isinstance(b, Sequence) and not isinstance(b, str) and tuple(a) == tuple(b)
            for a, b in zip(self, other, strict=True)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        count = len(self)
        shown = ", ".join(repr(self._lazy(i)) for i in range(min(count, 3)))
        more = f", ... ({count} groups)" if count > 3 else ""
        return f"[{shown}{more}]"


class OrthogonalGroups(GroupList):
    """The groups that vary along some axes of a grid; lazy, immutable, in Megatron's order.

    Every group is ascending; groups come in ascending order of their smallest rank.
    ``len`` is O(1), ``[i]`` is O(group size), iteration is O(world size).

    >>> groups = OrthogonalGroups(inner=((2, 2),), outer=((2, 1), (2, 4)), offset=0)
    >>> list(groups)
    [(0, 2), (1, 3), (4, 6), (5, 7)]
    >>> groups[-1], len(groups)
    ((5, 7), 4)
    """

    __slots__ = ("_inner", "_offset", "_offsets_cache", "_outer")

    def __init__(self, inner: Runs, outer: Runs, offset: int) -> None:
        self._inner = inner
        self._outer = outer
        self._offset = offset
        self._offsets_cache: tuple[int, ...] | None = None

    @property
    def group_size(self) -> int:
        """How many ranks each group holds."""
        return volume(self._inner)

    @property
    def structure(self) -> tuple[int, Runs, Runs]:
        """``(offset, inner runs, outer runs)``: group ``i`` is ``offset + point_outer(i) +
        point_inner(j)`` over its positions ``j``."""
        return self._offset, self._inner, self._outer

    def __len__(self) -> int:
        return volume(self._outer)

    def _offsets(self) -> tuple[int, ...]:
        if self._offsets_cache is None:
            self._offsets_cache = offsets(self._inner)
        return self._offsets_cache

    def build(self, base: int) -> tuple[int, ...]:
        """The group whose smallest rank is ``base``."""
        if type(base) is not int:
            raise TopologyError(f"base must be an int rank, got {show(base)}")
        inner = self._inner
        if not inner:
            return (base,)
        if len(inner) == 1:
            size, stride = inner[0]
            return tuple(range(base, base + size * stride, stride))
        return tuple(map(base.__add__, self._offsets()))

    def _item(self, index: int) -> tuple[int, ...]:
        return self.build(self._offset + point(index, self._outer))

    def _lazy(self, index: int) -> Ranks:
        return Ranks(self._offset + point(index, self._outer), self._inner)

    def bases(self) -> Iterator[int]:
        """The smallest rank of each group, in order."""
        outer = self._outer
        if not outer:
            yield self._offset
            return
        size, stride = outer[0]
        width = size * stride
        heads = (range(0, s * d, d) for s, d in reversed(outer[1:]))
        for head in product(*heads):
            start = self._offset + sum(head)
            yield from range(start, start + width, stride)

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        inner = self._inner
        outer = self._outer
        heads = [range(0, s * d, d) for s, d in reversed(outer[1:])]
        size0, stride0 = outer[0] if outer else (1, 1)
        width0 = size0 * stride0
        if not inner:
            for head in product(*heads):
                start = self._offset + sum(head)
                for base in range(start, start + width0, stride0):
                    yield (base,)
        elif len(inner) == 1:
            size, stride = inner[0]
            span = size * stride
            for head in product(*heads):
                start = self._offset + sum(head)
                for base in range(start, start + width0, stride0):
                    yield tuple(range(base, base + span, stride))
        else:
            points = self._offsets()
            for head in product(*heads):
                start = self._offset + sum(head)
                for base in range(start, start + width0, stride0):
                    yield tuple(map(base.__add__, points))

    def __contains__(self, group: object) -> bool:
        if not isinstance(group, Sequence) or isinstance(group, str) or not group:
            return False
        first = group[0]
        if type(first) is not int or self.index_of_rank(first) is None:
            return False
        return tuple(group) == self.build(self._base_of(first))

    def _base_of(self, rank: int) -> int:
        return rank - project(rank - self._offset, self._inner)

    def index_of_rank(self, rank: int) -> int | None:
        """Which group holds ``rank`` (None if the rank is outside these groups), O(runs)."""
        if type(rank) is not int:
            return None
        local = rank - self._offset
        if not 0 <= local < len(self) * self.group_size:
            return None
        return index_of(local, self._outer)


class DerivedGroups(GroupList):
    """Groups computed one at a time by a function of their index (lazy, immutable).

    ``group_size`` (when every group has that many ranks) and ``index_of`` (a function from a
    rank to the index of its group, or None) are optional facts the maker knows; without
    ``index_of``, :meth:`index_of_rank` tests the groups in order.

    >>> squares = DerivedGroups(3, lambda i: (i, i * i))
    >>> list(squares)
    [(0, 0), (1, 1), (2, 4)]
    >>> halves = DerivedGroups(2, lambda i: range(4 * i, 4 * i + 4), group_size=4,
    ...                        index_of=lambda r: r // 4 if 0 <= r < 8 else None)
    >>> halves.group_size, halves.index_of_rank(6), halves.ranks_of(9)
    (4, 1, None)
    """

    __slots__ = ("_count", "_index_of", "_make", "_size")

    def __init__(
        self,
        count: int,
        make: Callable[[int], Sequence[int]],
        *,
        group_size: int | None = None,
        index_of: Callable[[int], int | None] | None = None,
    ) -> None:
        check_index("count", count, at_most=None)
        if not callable(make):
            raise TopologyError(f"make must be a function of the group index, got {show(make)}")
        if group_size is not None:
            check_index("group_size", group_size, at_most=None)
        if index_of is not None and not callable(index_of):
            raise TopologyError(
                f"index_of must be a function from a rank to a group index, got {show(index_of)}"
            )
        self._count = count
        self._make = make
        self._size = group_size
        self._index_of = index_of

    def __len__(self) -> int:
        return self._count

    @property
    def group_size(self) -> int | None:
        """The ``group_size`` given at construction (None when the groups were not declared
        equal-sized)."""
        return self._size

    def _call_make(self, index: int) -> object:
        """``make(index)``; what the maker raises becomes a TopologyError naming the call."""
        try:
            return self._make(index)
        except TopologyError:
            raise
        except Exception as error:
            raise TopologyError(
                f"make({index}) raised {type(error).__name__}: {error}; make must map a group "
                "index to a sequence of ints"
            ) from error

    def _made(self, index: int) -> Sequence[int]:
        group = self._call_make(index)
        if isinstance(group, Ranks):
            return group
        if not isinstance(group, Sequence) or any(type(r) is not int for r in group):
            raise TopologyError(f"make({index}) must return a sequence of ints, got {show(group)}")
        return group

    def _item(self, index: int) -> tuple[int, ...]:
        return tuple(self._made(index))

    def _lazy(self, index: int) -> Ranks:
        return Ranks.of(cast("Sequence[int]", self._call_make(index)))

    def _holds(self, index: int, rank: int) -> bool:
        return rank in self._made(index)

    def index_of_rank(self, rank: int) -> int | None:
        """Which group holds ``rank`` (the first, if several do); None if none does.

        O(1) calls of ``index_of`` when it was given, else the groups are tested in order.
        """
        if self._index_of is None:
            return super().index_of_rank(rank)
        if type(rank) is not int:
            return None
        found = self._index_of(rank)
        if found is not None and (type(found) is not int or not 0 <= found < self._count):
            raise TopologyError(
                f"index_of({rank}) must return a group index from 0 to {self._count - 1} or "
                f"None, got {show(found)}"
            )
        return found
