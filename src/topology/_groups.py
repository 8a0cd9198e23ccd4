"""Lazy, immutable sequences of rank groups (private).

A set of orthogonal groups is two mixed-radix counters: the *masked* axes number the ranks inside
a group, the *unmasked* axes number the groups. Both are kept as runs of ``(size, stride)``,
innermost first, with size-1 axes dropped and contiguous axes merged, so that a group is usually
one ``range`` and the groups' first ranks usually one more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import product
from typing import overload

from ._errors import TopologyError

__all__ = ["DerivedGroups", "OrthogonalGroups", "Runs", "compress"]

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


class _GroupSequenceBase(Sequence[tuple[int, ...]]):
    """Shared sequence behaviour: negative indices, slices, equality with any sequence."""

    __slots__ = ()

    def _item(self, index: int) -> tuple[int, ...]:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> tuple[int, ...]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[int, ...]]: ...

    def __getitem__(self, index: int | slice) -> tuple[int, ...] | list[tuple[int, ...]]:
        if isinstance(index, slice):
            return [self._item(i) for i in range(*index.indices(len(self)))]
        count = len(self)
        if type(index) is not int or not -count <= index < count:
            raise IndexError(f"group index {index!r} out of range for {count} groups")
        return self._item(index % count)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        if len(self) != len(other):
            return False
        return all(tuple(a) == tuple(b) for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        count = len(self)
        shown = ", ".join(str(list(self._item(i))) for i in range(min(count, 3)))
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

    def __len__(self) -> int:
        return _span(self._outer)

    def _offsets(self) -> tuple[int, ...]:
        if self._offsets_cache is None:
            self._offsets_cache = _offsets(self._inner)
        return self._offsets_cache

    def build(self, base: int) -> tuple[int, ...]:
        """The group whose smallest rank is ``base``."""
        inner = self._inner
        if not inner:
            return (base,)
        if len(inner) == 1:
            size, stride = inner[0]
            return tuple(range(base, base + size * stride, stride))
        return tuple(map(base.__add__, self._offsets()))

    def _item(self, index: int) -> tuple[int, ...]:
        return self.build(self._offset + _decompose(index, self._outer))

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

    def __init__(self, count: int, make: Callable[[int], tuple[int, ...]]) -> None:
        if count < 0:
            raise TopologyError(f"a group count must be non-negative, got {count}")
        self._count = count
        self._make = make

    def __len__(self) -> int:
        return self._count

    def _item(self, index: int) -> tuple[int, ...]:
        return self._make(index)

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        return map(self._make, range(self._count))
