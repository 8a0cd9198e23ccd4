"""Shape:stride runs: the mixed-radix arithmetic every group of ranks is made of (private).

A *run* is ``(size, stride)``: the points ``0, stride, ..., (size - 1) * stride``. A tuple of runs,
innermost first, is the sum of its runs: point ``p`` reads ``p`` as a mixed-radix number (digit
``i`` has radix ``size_i``, digit 0 fastest) and is ``sum(digit_i * stride_i)``. When each stride
exceeds the largest point of the runs below it, points ascend with ``p``: the runs are the digits of
a rank. Every group in this package (a grid's groups, a lazy :class:`~.ranks.Ranks`, a placement
shape) is ``base + points(runs)``; this module is the one place that computes with them.

>>> runs = ((2, 1), (3, 8))
>>> volume(runs), top(runs), offsets(runs), point(3, runs), index_of(17, runs)
(6, 17, (0, 1, 8, 9, 16, 17), 9, 5)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = [
    "Runs",
    "aligned",
    "compress",
    "index_of",
    "max_gap",
    "normal",
    "offsets",
    "point",
    "project",
    "split",
    "top",
    "volume",
]

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
    for count, stride in zip(sizes, strides, strict=True):
        if count == 1:
            continue
        if runs and runs[-1][0] * runs[-1][1] == stride:
            runs[-1] = (runs[-1][0] * count, runs[-1][1])
        else:
            runs.append((count, stride))
    return tuple(runs)


def _stride(run: tuple[int, int]) -> int:
    return run[1]


def normal(runs: Iterable[tuple[int, int]]) -> Runs:
    """``runs`` in any order as canonical runs: sorted by stride, then :func:`compress`-ed.

    >>> normal([(4, 2), (2, 1), (1, 16)])
    ((8, 1),)
    """
    ordered = sorted(runs, key=_stride)
    return compress([s for s, _ in ordered], [d for _, d in ordered])


def volume(runs: Runs) -> int:
    """How many points ``runs`` have (the product of their sizes)."""
    count = 1
    for length, _ in runs:
        count *= length
    return count


def top(runs: Runs) -> int:
    """The largest point of ``runs`` (the smallest is 0)."""
    return sum((length - 1) * stride for length, stride in runs)


def offsets(runs: Runs) -> tuple[int, ...]:
    """Every point of ``runs`` in mixed-radix order, innermost digit fastest."""
    if not runs:
        return (0,)
    length, stride = runs[0]
    found: list[int] = list(range(0, length * stride, stride))
    for length, stride in runs[1:]:
        found = [step + o for step in range(0, length * stride, stride) for o in found]
    return tuple(found)


def point(position: int, runs: Runs) -> int:
    """Point number ``position`` of ``runs`` (its digits times the strides)."""
    offset = 0
    for length, stride in runs:
        position, digit = divmod(position, length)
        offset += digit * stride
    return offset


def index_of(value: int, runs: Runs) -> int:
    """The mixed-radix number of ``value``'s digits ``(value // stride) % size`` on ``runs``.

    For a point of a grid's ``runs`` (each stride a multiple of the span of the runs inside it,
    as every caller's are) this inverts :func:`point`; for a rank of a larger grid whose digits
    include ``runs`` it numbers the rank's digits on those runs alone (which group, which
    position).
    """
    found = 0
    scale = 1
    for length, stride in runs:
        found += ((value // stride) % length) * scale
        scale *= length
    return found


def project(value: int, runs: Runs) -> int:
    """The part of ``value`` that ``runs``' digits make: ``point(index_of(value, runs), runs)``."""
    return sum(((value // stride) % length) * stride for length, stride in runs)


def max_gap(runs: Runs) -> int:
    """The largest distance between consecutive points of ``runs`` (1 for a single point)."""
    gap = 1
    below = 0
    for length, stride in runs:
        if length > 1:
            gap = max(gap, stride - below)
        below += (length - 1) * stride
    return gap


def split(runs: Sequence[tuple[int, int]], width: int) -> tuple[Runs, Runs] | None:
    """Cut the digits ``runs`` at position ``width``: ``(low runs, high runs)``, or None.

    The low runs number the first ``width`` positions, the high runs number the blocks of
    ``width``; None when ``width`` does not fall on a digit boundary.

    >>> split(((4, 1), (3, 8)), 2)
    (((2, 1),), ((2, 2), (3, 8)))
    >>> split(((4, 1), (3, 8)), 3) is None
    True
    """
    low: list[tuple[int, int]] = []
    high: list[tuple[int, int]] = []
    need = width
    for length, stride in runs:
        if need == 1:
            high.append((length, stride))
        elif need % length == 0:
            low.append((length, stride))
            need //= length
        elif length % need == 0:
            low.append((need, stride))
            high.append((length // need, stride * need))
            need = 1
        else:
            return None
    return tuple(low), tuple(high)


def aligned(start: int, stop: int, runs: Runs) -> list[tuple[int, int, int]]:
    """Cut positions ``start .. stop - 1`` into digit-aligned pieces ``(first, level, count)``.

    A piece holds ``count`` consecutive values of digit ``level`` with every lower digit free.

    >>> aligned(2, 11, ((4, 1), (3, 16)))
    [(2, 0, 2), (4, 1, 1), (8, 0, 3)]
    """
    scales = [1]
    for length, _ in runs:
        scales.append(scales[-1] * length)
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
