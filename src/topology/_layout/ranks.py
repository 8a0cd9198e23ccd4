"""Ranks: one group of ranks held as runs instead of a tuple (private).

A group is ``base + point(p)`` over the positions ``p`` it keeps of its runs (see
:mod:`.runs`); ``len``, ``[i]``, ``in`` and ``index`` cost O(number of runs), whatever the size.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import pairwise
from typing import Any, overload

from .._args import show
from .._errors import GroupIndexError, TopologyError
from .runs import Runs, aligned, compress, point, volume

__all__ = [
    "JSON_RANKS",
    "SHOWN_RANKS",
    "Positions",
    "Ranks",
    "checked_index",
    "checked_slice",
]

Positions = range | tuple[int, ...]
"""Which points of a :class:`Ranks`' runs belong to it (ascending indices)."""

SHOWN_RANKS = 16
"""A :class:`Ranks` of at most this many ranks prints as a tuple; longer ones are summarised."""

JSON_RANKS = 1024
"""A group of at most this many ranks is a JSON list; a longer one is a summary object."""

_HASH_RANKS = 4096


def checked_index(index: object, count: int, what: str) -> int:
    """``index`` as a non-negative position below ``count`` (negative counts from the end)."""
    if type(index) is not int or not -count <= index < count:
        raise GroupIndexError(
            f"{what} index {show(index)} is out of range for {count} {what}s; "
            f"valid: {-count} to {count - 1}"
        )
    return index % count


def checked_slice(index: slice, count: int) -> range:
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
        self._positions: Positions = range(volume(runs)) if positions is None else positions

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
        if positions == range(volume(self._runs)):
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

    def compact(self) -> Positions:
        """The group as a ``range`` when it is one run (or one rank), else as a tuple.

        Either is a valid ``indices`` argument of :meth:`take`.

        >>> Ranks(4, ((3, 8),)).compact(), Ranks(4, ((2, 1), (2, 8))).compact()
        (range(4, 28, 8), (4, 5, 12, 13))
        """
        whole = self.runs
        if whole is not None and len(whole[1]) <= 1:
            first, runs = whole
            length, stride = runs[0] if runs else (1, 1)
            return range(first, first + length * stride, stride)
        return tuple(self)

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
                for start, level, count in aligned(positions.start, positions.stop, runs)
            ]
        if len(positions) > limit:
            return None
        return [(rank, ()) for rank in self]

    # -- sequence -----------------------------------------------------------------------------

    def _point(self, position: int) -> int:
        return self._base + point(position, self._runs)

    def _position_of(self, rank: object) -> int | None:
        if type(rank) is not int or rank < self._base:
            return None
        rest = rank - self._base
        position = 0
        scale = volume(self._runs)
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
            checked_slice(index, count)
            return Ranks(self._base, self._runs, self._positions[index])
        return self._point(self._positions[checked_index(index, count, "rank")])

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
