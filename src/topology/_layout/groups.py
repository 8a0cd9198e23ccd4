"""Lazy, immutable sequences of rank groups (private).

A set of orthogonal groups is two mixed-radix counters: the *masked* axes number the ranks inside
a group, the *unmasked* axes number the groups. Both are kept as runs of ``(size, stride)``,
innermost first, with size-1 axes dropped and contiguous axes merged, so that a group is usually
one ``range`` and the groups' first ranks usually one more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import pairwise, product
from typing import Any, overload

from .._args import show
from .._errors import GroupIndexError, TopologyError

__all__ = ["DerivedGroups", "OrthogonalGroups", "Ranks", "Runs", "compress"]

Runs = tuple[tuple[int, int], ...]
"""``((size, stride), ...)`` innermost first."""


def compress(sizes: Sequence[int], strides: Sequence[int]) -> Runs:
    """Drop size-1 axes and merge an axis into the previous run when it continues it.

    >>> compress([2, 1, 4], [1, 2, 2])
    ((8, 1),)
    >>> compress([2, 4], [1, 4])
    ((2, 1), (4, 4))
    """
    runs: list[tuple[int, int]] = []
    for size, stride in zip(sizes, strides, strict=True):
        if size == 1:
            continue
        if runs and runs[-1][0] * runs[-1][1] == stride:
            runs[-1] = (runs[-1][0] * size, runs[-1][1])
        else:
            runs.append((size, stride))
    return tuple(runs)


def _span(runs: Runs) -> int:
    count = 1
    for size, _ in runs:
        count *= size
    return count


def _offsets(runs: Runs) -> tuple[int, ...]:
    """All ``sum(c_i * stride_i)`` in mixed-radix order, innermost fastest."""
    if not runs:
        return (0,)
    size, stride = runs[0]
    offsets: list[int] = list(range(0, size * stride, stride))
    for size, stride in runs[1:]:
        offsets = [step + o for step in range(0, size * stride, stride) for o in offsets]
    return tuple(offsets)


def _decompose(index: int, runs: Runs) -> int:
    """The offset of the ``index``-th point of ``runs`` (mixed radix, innermost fastest)."""
    offset = 0
    for size, stride in runs:
        index, digit = divmod(index, size)
        offset += digit * stride
    return offset


Positions = range | tuple[int, ...]
"""Which points of a :class:`Ranks`' runs belong to it (ascending indices)."""

SHOWN_RANKS = 16
"""A :class:`Ranks` of at most this many ranks prints as a tuple; longer ones are summarised."""

JSON_RANKS = 1024
"""A group of at most this many ranks is a JSON list; a longer one is a summary object."""

_HASH_RANKS = 4096


def _checked_index(index: object, count: int, what: str) -> int:
    """``index`` as a non-negative position below ``count`` (negative counts from the end)."""
    if type(index) is not int or not -count <= index < count:
        raise GroupIndexError(
            f"{what} index {show(index)} is out of range for {count} {what}s; "
            f"valid: {-count} to {count - 1}"
        )
    return index % count


def _checked_slice(index: slice, count: int) -> range:
    """The positions a slice selects; its bounds must be ints or None."""
    for bound in (index.start, index.stop, index.step):
        if bound is not None and type(bound) is not int:
            raise TopologyError(f"slice bounds must be ints or None, got {show(bound)}")
    if index.step == 0:
        raise TopologyError("slice step cannot be zero")
    return range(*index.indices(count))


class Ranks(Sequence[int]):
    """One group of ranks, ascending, held as structure instead of a tuple (lazy, immutable).

    The group is ``base + point(p)`` for each ``p`` in ``positions``, where ``point`` reads ``p``
    as a mixed-radix number over ``runs`` (``(size, stride)``, innermost first, each stride
    larger than the span of the runs below, so points ascend with ``p``). ``len``, ``[i]``,
    ``in`` and ``index`` cost O(number of runs); slices are lazy; ``==`` compares with any
    sequence of ints, so a ``Ranks`` equals the tuple it stands for.

    >>> group = Ranks(4, ((2, 1), (3, 8)))
    >>> group, len(group), group[-1], group.index(21), 20 in group
    ((4, 5, 12, 13, 20, 21), 6, 21, 5, True)
    >>> Ranks(0, ((1 << 30, 8),))
    <1073741824 ranks: 0, 8, 16, 24, …, 8589934584>
    """

    __slots__ = ("_base", "_positions", "_runs")

    def __init__(self, base: int, runs: Runs, positions: Positions | None = None) -> None:
        self._base = base
        self._runs = runs
        self._positions: Positions = range(_span(runs)) if positions is None else positions

    @classmethod
    def of(cls, ranks: Sequence[int]) -> Ranks:
        """``ranks`` (a Ranks, a range with a positive step, or ascending ints) as a Ranks.

        >>> Ranks.of(range(3, 12, 4)), Ranks.of((2, 3, 7)).index(7)
        ((3, 7, 11), 2)
        """
        if isinstance(ranks, Ranks):
            return ranks
        if isinstance(ranks, range) and ranks.step > 0:
            return cls(ranks.start, compress([len(ranks)], [ranks.step]))
        if not isinstance(ranks, Sequence) or isinstance(ranks, (str, bytes)):
            raise TopologyError(f"ranks must be a sequence of ints, got {show(ranks)}")
        items = tuple(ranks)
        if any(type(r) is not int or r < 0 for r in items) or any(
            b <= a for a, b in pairwise(items)
        ):
            raise TopologyError(
                f"ranks must be ascending non-negative ints, got {show(items)}; sort them"
            )
        if not items:
            return cls(0, (), ())
        base = items[0]
        return cls(base, ((items[-1] - base + 1, 1),), tuple(r - base for r in items))

    # -- structure ----------------------------------------------------------------------------

    @property
    def runs(self) -> tuple[int, Runs] | None:
        """``(first rank, runs)`` when the group is exactly ``first + point(p)`` over runs.

        None when the group is a chunk that cuts the runs unevenly (or an explicit set).

        >>> Ranks(4, ((2, 1), (3, 8))).runs
        (4, ((2, 1), (3, 8)))
        >>> Ranks(0, ((2, 1), (3, 8)), range(1, 4)).runs is None
        True
        """
        positions = self._positions
        if not isinstance(positions, range) or positions.step < 1:
            return None
        if positions == range(_span(self._runs)):
            return self._base, self._runs
        if len(self._runs) == 1 and positions:
            stride = self._runs[0][1]
            return self._base + positions.start * stride, compress(
                [len(positions)], [positions.step * stride]
            )
        return None

    def take(self, indices: Positions) -> Ranks:
        """The sub-group at ``indices`` (ascending, in range), lazily.

        >>> Ranks(0, ((4, 1), (2, 16))).take(range(2, 6))
        (2, 3, 16, 17)
        """
        positions = self._positions
        if isinstance(indices, range):
            return Ranks(
                self._base, self._runs, positions[indices.start : indices.stop : indices.step]
            )
        return Ranks(self._base, self._runs, tuple(positions[i] for i in indices))

    def blocks(self, limit: int = _HASH_RANKS) -> list[tuple[int, Runs]] | None:
        """The group as ascending pieces ``first + point(p)`` over runs (at most 2 per run).

        None when the group has no such short description (a strided chunk of several runs
        with more than ``limit`` ranks).

        >>> Ranks(0, ((4, 1), (3, 16)), range(2, 11)).blocks()
        [(2, ((2, 1),)), (16, ((4, 1),)), (32, ((3, 1),))]
        """
        whole = self.runs
        if whole is not None:
            return [whole]
        positions = self._positions
        if isinstance(positions, range) and positions.step == 1:
            runs = self._runs
            return [
                (
                    self._point(start),
                    compress(
                        [size for size, _ in runs[:level]] + [count],
                        [stride for _, stride in runs[: level + 1]],
                    ),
                )
                for start, level, count in _aligned(positions.start, positions.stop, runs)
            ]
        if len(positions) > limit:
            return None
        return [(rank, ()) for rank in self]

    # -- sequence -----------------------------------------------------------------------------

    def _point(self, position: int) -> int:
        return self._base + _decompose(position, self._runs)

    def _position_of(self, rank: object) -> int | None:
        if type(rank) is not int or rank < self._base:
            return None
        rest = rank - self._base
        position = 0
        scale = _span(self._runs)
        for size, stride in reversed(self._runs):
            scale //= size
            digit = rest // stride
            if digit >= size:
                return None
            rest -= digit * stride
            position += digit * scale
        return position if rest == 0 else None

    def __len__(self) -> int:
        return len(self._positions)

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> Ranks: ...

    def __getitem__(self, index: int | slice) -> int | Ranks:
        count = len(self._positions)
        if isinstance(index, slice):
            _checked_slice(index, count)
            return Ranks(self._base, self._runs, self._positions[index])
        return self._point(self._positions[_checked_index(index, count, "rank")])

    def __iter__(self) -> Iterator[int]:
        runs = self._runs
        if len(runs) == 1 and self._positions == range(runs[0][0]):
            size, stride = runs[0]
            return iter(range(self._base, self._base + size * stride, stride))
        return map(self._point, self._positions)

    def __contains__(self, rank: object) -> bool:
        position = self._position_of(rank)
        return position is not None and position in self._positions

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        """Where ``value`` sits in the group, in O(number of runs); ValueError if absent."""
        position = self._position_of(value)
        if position is not None and position in self._positions:
            found = self._positions.index(position)
            if start <= found and (stop is None or found < stop):
                return found
        raise TopologyError(f"{show(value)} is not in this group")

    def count(self, value: Any) -> int:
        """1 if ``value`` is in the group, else 0."""
        return int(value in self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        if isinstance(other, Ranks) and (self._base, self._runs, self._positions) == (
            other._base,
            other._runs,
            other._positions,
        ):
            return True
        if len(self) != len(other):
            return False
        if len(self) and (self[0] != other[0] or self[-1] != other[-1]):
            return False
        return all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        # Short groups hash like the tuple they equal; long ones by size and ends (O(runs)).
        if len(self) <= _HASH_RANKS:
            return hash(tuple(self))
        return hash((len(self), self[0], self[1], self[-1]))

    def __repr__(self) -> str:
        count = len(self)
        if count <= SHOWN_RANKS:
            return repr(tuple(self))
        head = ", ".join(str(self[i]) for i in range(4))
        return f"<{count} ranks: {head}, …, {self[-1]}>"

    def to_json(self, limit: int = JSON_RANKS) -> list[int] | dict[str, Any]:
        """A list of ranks when at most ``limit``, else a summary with the runs (docs/cli.md).

        >>> summary = Ranks(0, ((1 << 20, 8),)).to_json()
        >>> summary["size"], summary["first"][:3], summary["last"], summary["runs"]
        (1048576, [0, 8, 16], 8388600, [[1048576, 8]])
        """
        count = len(self)
        if count <= limit:
            return list(self)
        whole = self.runs
        return {
            "size": count,
            "first": list(self[:8]),
            "last": self[-1],
            "runs": None if whole is None else [list(run) for run in whole[1]],
        }


def _aligned(start: int, stop: int, runs: Runs) -> list[tuple[int, int, int]]:
    """Cut positions ``start .. stop - 1`` into digit-aligned pieces ``(first, level, count)``.

    A piece holds ``count`` consecutive values of digit ``level`` with every lower digit free.
    """
    scales = [1]
    for size, _ in runs:
        scales.append(scales[-1] * size)
    pieces: list[tuple[int, int, int]] = []
    position, level = start, 0
    while level < len(runs) and position < stop:
        step, upper = scales[level], scales[level + 1]
        if position % upper:
            count = min((upper - position % upper) // step, (stop - position) // step)
            if count == 0:
                break
            pieces.append((position, level, count))
            position += count * step
            if position % upper:
                break
        level += 1
    level = min(level, len(runs) - 1)
    while position < stop:
        while scales[level] > stop - position:
            level -= 1
        count = (stop - position) // scales[level]
        pieces.append((position, level, count))
        position += count * scales[level]
    return pieces


class _GroupSequenceBase(Sequence[tuple[int, ...]]):
    """Shared sequence behaviour: negative indices, slices, equality with any sequence."""

    __slots__ = ()

    def _item(self, index: int) -> tuple[int, ...]:
        raise NotImplementedError

    def _lazy(self, index: int) -> Ranks:
        return Ranks.of(self._item(index))

    def ranks(self, index: int) -> Ranks:
        """Group ``index`` as a lazy :class:`Ranks` (O(number of runs), nothing enumerated).

        >>> OrthogonalGroups(inner=((1 << 30, 2),), outer=((2, 1),), offset=0).ranks(-1)
        <1073741824 ranks: 1, 3, 5, 7, …, 2147483647>
        """
        return self._lazy(_checked_index(index, len(self), "group"))

    @overload
    def __getitem__(self, index: int) -> tuple[int, ...]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[int, ...]]: ...

    def __getitem__(self, index: int | slice) -> tuple[int, ...] | list[tuple[int, ...]]:
        if isinstance(index, slice):
            return [self._item(i) for i in _checked_slice(index, len(self))]
        return self._item(_checked_index(index, len(self), "group"))

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


class OrthogonalGroups(_GroupSequenceBase):
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
        return _span(self._inner)

    @property
    def structure(self) -> tuple[int, Runs, Runs]:
        """``(offset, inner runs, outer runs)``: group ``i`` is ``offset + point_outer(i) +
        point_inner(j)`` over its positions ``j``."""
        return self._offset, self._inner, self._outer

    def __len__(self) -> int:
        return _span(self._outer)

    def _offsets(self) -> tuple[int, ...]:
        if self._offsets_cache is None:
            self._offsets_cache = _offsets(self._inner)
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
        return self.build(self._offset + _decompose(index, self._outer))

    def _lazy(self, index: int) -> Ranks:
        return Ranks(self._offset + _decompose(index, self._outer), self._inner)

    def ranks_of(self, rank: int) -> Ranks | None:
        """The group holding ``rank`` as a lazy :class:`Ranks` (None if outside)."""
        if self.index_of_rank(rank) is None:
            return None
        return Ranks(self._base_of(rank), self._inner)

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
            offsets = self._offsets()
            for head in product(*heads):
                start = self._offset + sum(head)
                for base in range(start, start + width0, stride0):
                    yield tuple(map(base.__add__, offsets))

    def __contains__(self, group: object) -> bool:
        if not isinstance(group, Sequence) or isinstance(group, str) or not group:
            return False
        first = group[0]
        if type(first) is not int or self.index_of_rank(first) is None:
            return False
        return tuple(group) == self.build(self._base_of(first))

    def _base_of(self, rank: int) -> int:
        local = rank - self._offset
        inner_part = 0
        for size, stride in self._inner:
            inner_part += ((local // stride) % size) * stride
        return rank - inner_part

    def index_of_rank(self, rank: int) -> int | None:
        """Which group holds ``rank`` (None if the rank is outside these groups)."""
        if type(rank) is not int:
            return None
        local = rank - self._offset
        if not 0 <= local < len(self) * self.group_size:
            return None
        index = 0
        scale = 1
        for size, stride in self._outer:
            index += ((local // stride) % size) * scale
            scale *= size
        return index


class DerivedGroups(_GroupSequenceBase):
    """Groups computed one at a time by a function of their index (lazy, immutable).

    >>> squares = DerivedGroups(3, lambda i: (i, i * i))
    >>> list(squares)
    [(0, 0), (1, 1), (2, 4)]
    """

    __slots__ = ("_count", "_make")

    def __init__(self, count: int, make: Callable[[int], Sequence[int]]) -> None:
        if type(count) is not int or count < 0:
            raise TopologyError(f"a group count must be a non-negative int, got {show(count)}")
        if not callable(make):
            raise TopologyError(f"make must be a function of the group index, got {show(make)}")
        self._count = count
        self._make = make

    def __len__(self) -> int:
        return self._count

    def _item(self, index: int) -> tuple[int, ...]:
        group = self._make(index)
        if not isinstance(group, Sequence) or any(type(r) is not int for r in group):
            raise TopologyError(f"make({index}) must return a sequence of ints, got {show(group)}")
        return tuple(group)

    def _lazy(self, index: int) -> Ranks:
        return Ranks.of(self._make(index))

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        return map(self._item, range(self._count))

    def __contains__(self, group: object) -> bool:
        """Like :class:`OrthogonalGroups`: any sequence of ints equal to a group (O(W))."""
        if not isinstance(group, Sequence) or isinstance(group, str) or not group:
            return False
        if any(type(rank) is not int for rank in group):
            return False
        wanted = tuple(group)
        return any(item == wanted for item in self)
