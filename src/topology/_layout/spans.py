"""How many units of ``u`` consecutive ranks a group touches, without listing its ranks (private).

A unit is any block of ``u`` consecutive ranks (``n(r) = r // u``): a node, an NVLink domain.
The groups of one family are translates ``base + X`` of one offset set ``X``, a sum of runs
``(size, stride)`` sorted by stride, each stride larger than the span of the runs below it (the
digits of a mixed-radix rank, :mod:`.runs`); the bases are ``offset + sum(c_j * e_j)`` over the
family's *outer* runs. The number of units one group touches depends only on ``base mod u``.

Algorithm (no group is ever enumerated beyond a few thousand ranks):

1. Residues: the set of ``base mod u`` over all groups is built run by run; run ``(s, e)`` adds
   ``c * e mod u`` for ``c < min(s, u / gcd(e, u))`` (the multiples cycle after that), so the set
   never exceeds ``u`` entries and each residue keeps one witness base. Past
   ``RESIDUE_BUDGET`` residues (only for huge ``u``) the witnesses found so far are measured
   and the answer says ``exact=False``.
2. Units of ``base + X`` for one residue, the first rule that applies:

   - the runs with stride ``< u`` form the low part ``L``; consecutive points of ``L`` are less
     than ``u`` apart, so ``base + L`` covers the contiguous units ``n(base) .. n(base + max L)``,
     ``w`` of them. When each remaining run has a stride that is a multiple of ``u``, it copies
     the covered units ``s`` times, ``e / u`` units apart: with ``t`` the extent of the cover so
     far, copies are disjoint when ``t <= e / u`` (count multiplies by ``s``) and merge into one
     contiguous block when the cover is contiguous (extent ``(s - 1) * e / u + t``);
   - when no two consecutive points of ``X`` are more than ``u`` apart, no unit between the
     first and the last is empty: ``n(base + max X) - n(base) + 1``;
   - a group of at most ``_POINTS_LIMIT`` ranks is counted point by point;
   - otherwise by recursion on the outermost run: the ``s`` copies of the lower runs' set each
     cover ``f(residue of the copy)`` units, minus one wherever a copy's last unit is the next
     copy's first; the copies' residues cycle with period ``u / gcd(e, u)``, so each level sums
     one period (memoised per residue, within ``_RECURSION_BUDGET`` steps, else an upper bound
     and ``exact=False``).

A group that is no translate of a product of runs (a chunk that cuts a run unevenly) is measured
as the union of its aligned pieces, at most two per run (:func:`ranks_units`); consecutive pieces
share at most one unit.
"""

from __future__ import annotations

from collections.abc import Iterable
from math import gcd

import attrs

from .ranks import Ranks
from .runs import Runs, max_gap, normal, top, volume

__all__ = ["RESIDUE_BUDGET", "Shape", "ranks_units", "units_spanned"]

RESIDUE_BUDGET = 512
"""At most this many distinct ``base mod u`` are measured per family and unit."""

_POINTS_LIMIT = 4096
"""A group of at most this many ranks may be counted point by point."""

_RECURSION_BUDGET = 1 << 14
"""Steps the residue recursion may take for one group before it settles for a bound."""


def _closed_form(base: int, runs: Runs, unit: int) -> int | None:
    """Units of ``base + X`` when every run at or above ``unit`` strides in whole units."""
    low = 0
    index = 0
    while index < len(runs) and runs[index][1] < unit:
        low += (runs[index][0] - 1) * runs[index][1]
        index += 1
    width = (base + low) // unit - base // unit + 1
    count = extent = width
    contiguous = True
    for size, stride in runs[index:]:
        if stride % unit:
            return None
        step = stride // unit
        if extent <= step:
            contiguous = contiguous and extent == step
            count *= size
        elif contiguous:
            count = (size - 1) * step + extent
        else:
            return None
        extent = (size - 1) * step + extent
    return count


class _TooHard(Exception):
    """The recursion ran out of budget."""


def _recursive(residue: int, runs: Runs, unit: int) -> int:
    """Units of ``residue + X`` by recursion on the outermost run (see the module doc)."""
    tops = [0]
    for size, stride in runs:
        tops.append(tops[-1] + (size - 1) * stride)
    memo: dict[tuple[int, int], int] = {}
    steps = [_RECURSION_BUDGET]

    def count(level: int, start: int) -> int:
        if level == 0:
            return 1
        key = (level, start)
        if key in memo:
            return memo[key]
        size, stride = runs[level - 1]
        low = tops[level - 1]
        move = stride % unit
        period = unit // gcd(move, unit)  # 1 when move is 0: gcd(0, unit) == unit

        def step(c: int) -> int:
            # copy c's units, less one if its first unit is copy c - 1's last
            previous = (start + (c - 1) * stride) % unit
            shared = (previous + low) // unit == (previous + stride) // unit
            return count(level - 1, (start + c * stride) % unit) - shared

        copies = size - 1
        cycle = min(copies, period)
        steps[0] -= cycle + 1
        if steps[0] < 0:
            raise _TooHard
        terms = [step(c) for c in range(1, cycle + 1)]
        total = count(level - 1, start) + sum(terms) * (copies // cycle if cycle else 0)
        total += sum(terms[: copies % cycle]) if cycle else 0
        memo[key] = total
        return total

    return count(len(runs), residue % unit)


def units_spanned(base: int, runs: Runs, unit: int) -> tuple[int, bool]:
    """``(units, exact)``: how many units (``r // unit``) the group ``base + X`` touches.

    ``X`` is the mixed-radix point set of ``runs``; ``exact`` is False only when the count is
    an upper bound (see the module doc).

    >>> units_spanned(6, ((2, 1), (4, 4)), 3)  # ranks 6, 7, 10, 11, ..., 19
    (5, True)
    >>> units_spanned(0, ((2, 1), (1 << 20, 10)), 8)  # by recursion, nothing enumerated
    (1048576, True)
    """
    if not runs:
        return 1, True
    closed = _closed_form(base, runs, unit)
    if closed is not None:
        return closed, True
    largest = top(runs)
    if max_gap(runs) <= unit:
        return (base + largest) // unit - base // unit + 1, True
    if volume(runs) <= _POINTS_LIMIT:
        return len({r // unit for r in Ranks(base, runs)}), True
    try:
        return _recursive(base, runs, unit), True
    except _TooHard:
        return min(volume(runs), (base % unit + largest) // unit + 1), False


def ranks_units(group: Ranks, unit: int) -> tuple[int, bool]:
    """``(units, exact)`` for any :class:`Ranks`, measured piece by piece (see the module doc).

    >>> ranks_units(Ranks(0, ((4, 1), (3, 16)), range(2, 11)), 8)  # 2, 3, 16..19, 32..34
    (3, True)
    """
    pieces = group.blocks()
    if pieces is None:  # a strided chunk of several runs: no short description
        return len(group), False
    total = 0
    exact = True
    last_unit = None
    for first, runs in pieces:
        count, sure = units_spanned(first, runs, unit)
        total += count - (first // unit == last_unit)
        exact = exact and sure
        last_unit = (first + top(runs)) // unit
    return total, exact


@attrs.frozen
class Shape:
    """A family of groups as translates ``base + X`` (see the module doc).

    ``inner`` are the runs of ``X`` (sorted by stride), or None when ``X`` is not a product of
    runs and ``explicit`` lists its offsets; ``outer`` are the runs that number the groups, from
    the first base ``offset``.

    >>> shape = Shape(((2, 1),), (), ((3, 3),), 0)  # groups (0, 1), (3, 4), (6, 7)
    >>> shape.extremes(4), shape.leaves(4), shape.leaves(8)
    ((2, 3, 1, True), True, False)
    """

    inner: Runs | None
    explicit: tuple[int, ...]
    outer: Runs
    offset: int

    @classmethod
    def regular(
        cls, inner: Iterable[tuple[int, int]], outer: Iterable[tuple[int, int]], offset: int
    ) -> Shape:
        """Groups that are products of ``inner`` runs, numbered by ``outer`` runs from ``offset``.

        >>> Shape.regular([(2, 4)], [(4, 1), (1, 8)], 0)
        Shape(inner=((2, 4),), explicit=(), outer=((4, 1),), offset=0)
        """
        return cls(normal(inner), (), normal(outer), offset)

    @property
    def key(self) -> tuple[object, ...]:
        """Equal keys mean the same family of groups (first base, canonical ``X``, outer runs).

        ``X`` alone is not enough: translates of one ``X`` from different bases cover different
        ranks.
        """
        inner = ("runs", self.inner) if self.inner is not None else ("offsets", self.explicit)
        return (self.offset, inner, self.outer)

    def group(self, base: int) -> Ranks:
        """The group ``base + X``, lazily."""
        if self.inner is not None:
            return Ranks(base, self.inner)
        explicit = self.explicit
        return Ranks(base, ((explicit[-1] + 1, 1),), explicit)

    def residues(self, unit: int, limit: int = RESIDUE_BUDGET) -> tuple[dict[int, int], bool]:
        """``({base mod unit: one base with that residue}, complete)`` over all groups.

        ``complete`` is False when more than ``limit`` residues exist; then ``limit`` of them
        are returned.
        """
        found = {self.offset % unit: self.offset}
        complete = True
        for size, stride in self.outer:
            step = stride % unit
            period = unit // gcd(step, unit)  # 1 when step is 0
            grown: dict[int, int] = {}
            for residue, witness in found.items():
                for c in range(min(size, period)):
                    if len(grown) >= limit:
                        complete = False
                        break
                    grown.setdefault((residue + c * step) % unit, witness + c * stride)
            found = grown
        return found, complete

    def units_spanned(self, base: int, unit: int) -> tuple[int, bool]:
        """``(units, exact)``: how many units (``r // unit``) the group ``base + X`` touches."""
        if self.inner is None:
            return len({(base + x) // unit for x in self.explicit}), True
        return units_spanned(base, self.inner, unit)

    def extremes(self, unit: int) -> tuple[int, int, int, bool]:
        """``(most units, a base that spans them, fewest units, exact)`` over all groups."""
        residues, exact = self.residues(unit)
        spans: dict[int, int] = {}
        for residue, base in residues.items():
            spans[residue], sure = self.units_spanned(base, unit)
            exact = exact and sure
        worst = max(spans, key=spans.__getitem__)
        return spans[worst], residues[worst], min(spans.values()), exact

    def leaves(self, unit: int) -> bool:
        """True if some group touches two units; exact for every ``unit``.

        The same measure as ``extremes(unit)[0] > 1`` but never sampled: a group whose ``X``
        reaches ``unit`` always leaves it, and otherwise every residue is measured (there are
        at most ``unit``), each by the closed form.
        """
        largest = top(self.inner) if self.inner is not None else self.explicit[-1]
        if largest == 0 or largest >= unit:
            return largest > 0
        residues, _ = self.residues(unit, limit=unit + 1)
        return any(self.units_spanned(base, unit)[0] > 1 for base in residues.values())
