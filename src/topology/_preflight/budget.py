"""What a layout's communicators cost before launch: GPU memory per rank and NVLS multicast
groups per NVLink domain (private).

- Memory: every distinct communicator a rank joins holds its own NCCL buffers. NVIDIA/nccl#964
  measured 544 MB for a 2-rank and 688 MB for a larger communicator on A100 NVLink (channels and
  algorithms change it, NVIDIA/nccl#986); :data:`NCCL_MEMORY` is the larger figure, and callers
  may give their own.
- NVLS: on NVSwitch systems every communicator that uses NVLink SHARP takes a multicast object
  on the switch of each NVLink domain it has two or more ranks in; an NVSwitch has
  :data:`NVLS_LIMIT` of them (NVIDIA/nccl#2077, pytorch/pytorch#187155), and duplicates of one
  rank set each take their own. We count, per NVLink domain, the distinct communicators
  ``ProcessGroups.create`` makes (kinds with equal groups count once, unless ``separate`` or
  their own ``pg_options`` part them; an ``independent`` kind counts twice) with two or more
  ranks in it: an upper bound on what NCCL allocates, since it may choose another algorithm.
  A regular kind is counted from its group shape per offset class of the domains, never rank
  by rank (:class:`_Windows`).

>>> from topology import Topology
>>> most, domain, exact = nvls_groups(Topology(16, tp=2, pp=2), [r // 8 for r in range(16)])
>>> most, domain, exact
(11, 0, True)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import groupby, pairwise
from typing import Any

import attrs

from .._layout.runs import Runs, normal, point, volume
from .._layout.spans import Shape
from .._megatron.shapes import shape_of
from .._megatron.topology import Topology
from .communicators import kind_names, option_ids
from .crossings import distinct_kinds

__all__ = [
    "DOMAIN_SAMPLE",
    "NCCL_MEMORY",
    "NVLS_LIMIT",
    "families",
    "nvls_groups",
    "nvls_groups_in",
    "nvls_groups_sampled",
]

NCCL_MEMORY = 688e6
"""Bytes of GPU memory one NCCL communicator holds (NVIDIA/nccl#964, A100, more than 2 ranks)."""

NVLS_LIMIT = 128
"""NVLink SHARP multicast groups one NVSwitch domain can hold (NVIDIA/nccl#2077)."""

DOMAIN_SAMPLE = 1 << 12
"""A sampled domain is measured on at most this many of its ranks."""


Token = tuple[object, ...]
"""What sets one kind's communicators apart from another kind's with the same ranks: its copy
number and its settings (``("alone", kind)`` for a separate kind, ``("options", id)`` for a
kind given ``pg_options``), exactly as ``ProcessGroups.create`` keys a communicator."""


def families(
    topo: Topology,
    *,
    separate: Iterable[str] = (),
    independent: Iterable[str] = (),
    pg_options: Mapping[str, object] | None = None,
) -> list[tuple[str, Token]]:
    """The communicator families ``create`` makes: per non-singleton kind its main
    communicators, and a second copy for each ``independent`` kind, with their tokens.

    A family whose groups and token equal an earlier family's is left out (one communicator),
    as the adapter makes it; a separate kind, or one with its own ``pg_options`` object, never
    shares.

    >>> [kind for kind, _ in families(Topology(8, tp=2, pp=2), independent=("dp",))]
    ['dp-cp', 'tp-pp', 'tp', 'pp', 'tp-dp-cp', 'dp']
    """
    alone = kind_names(topo, separate, "separate")
    copies = kind_names(topo, independent, "independent")
    options = option_ids(topo, pg_options)
    first = distinct_kinds(topo, topo.kinds)
    found: list[tuple[str, Token]] = []
    seen: set[tuple[str, Token]] = set()
    for copy in (0, 1):
        for kind in topo.kinds:
            if topo.size(kind) == 1 or (copy and kind not in copies):
                continue
            setting: object = options.get(kind)
            if kind in alone and not copy:
                setting = ("alone", kind)
            token: Token = (copy, setting)
            if (first[kind], token) not in seen:
                seen.add((first[kind], token))
                found.append((kind, token))
    return found


Span = tuple[int, int]
"""``(first, end)``: the consecutive ranks ``first .. end - 1``."""

Interval = tuple[int, int]
"""``(low, high)``: the integers ``low .. high``, both included."""

_INTERVAL_LIMIT = 64
"""A family whose window starts need more intervals than this walks the ranks."""


def _domain_counts(
    topo: Topology, domains: Sequence[Sequence[Span]], chosen: list[tuple[str, Token]]
) -> list[int]:
    """Per domain (its ranks as ascending spans), how many communicators of ``chosen`` hold
    two or more of its ranks.

    Communicators are told apart by :func:`_identity`: where every kind is regular each family's
    groups are its own, so the families' counts add up; where an irregular kind may repeat
    another kind's group, the groups of at most :data:`DOMAIN_SAMPLE` ranks are listed and equal
    rank sets with one token counted once. A regular family is counted per group shape on a
    domain of one span (:class:`_Windows`: time O(intervals x runs) per offset class of the
    domains, whatever their ranks); an irregular one, or a domain of several spans, walks the
    ranks (O(ranks) lookups).
    """
    by_ranks = any(shape_of(topo, kind) is None for kind, _ in chosen)
    totals = [0] * len(domains)
    named: list[set[object]] = [set() for _ in domains]
    for kind, token in chosen:
        listed = by_ranks and topo.size(kind) <= DOMAIN_SAMPLE
        shape = shape_of(topo, kind)
        widths: dict[int, _Windows | None] = {}
        for domain, spans in enumerate(domains):
            found: Sequence[int] | None = None
            if shape is not None and len(spans) == 1:
                first, end = spans[0]
                if end - first not in widths:
                    widths[end - first] = _Windows.of(shape, end - first)
                windows = widths[end - first]
                if windows is not None and not listed:
                    totals[domain] += windows.count(first)
                    continue
                if windows is not None:
                    found = [topo.group_index(rank, kind) for rank in windows.points(first)]
            if found is None:
                found = _walked(topo, kind, spans, listed)
            if listed:
                named[domain].update((token, _identity(topo, kind, i)) for i in found)
            else:
                totals[domain] += len(found)
    return [n + len(groups) for n, groups in zip(totals, named, strict=True)]


def _walked(topo: Topology, kind: str, spans: Sequence[Span], listed: bool) -> list[int]:
    """The groups of ``kind`` with two or more ranks of ``spans``, rank by rank: their indices
    when ``listed``, else one distinct number each (the group's first rank where the kind's
    shape is a product of nested runs, read off each rank's digits with no group lookup)."""
    shape = shape_of(topo, kind)
    digits = _digits(shape) if shape is not None else None
    if shape is None or digits is None:
        members: Counter[int] = Counter(
            topo.group_index(rank, kind)
            for first, end in spans
            for rank in range(first, end)
            if topo.has_group(rank, kind)
        )
        return [index for index, n in members.items() if n > 1]
    offset = shape.offset
    bases: Counter[int] = Counter()
    for first, end in spans:
        for rank in range(first, end):
            base = _base(rank - offset, digits)
            if base is not None:
                bases[base] += 1
    held = [offset + base for base, n in bases.items() if n > 1]
    return [topo.group_index(rank, kind) for rank in held] if listed else held


Digits = tuple[tuple[int, int, bool], ...]
"""A shape's inner and outer runs together, outermost first: ``(size, stride, outer)``."""


def _digits(shape: Shape) -> Digits | None:
    """The runs of ``shape`` as the digits of a rank (None when ``X`` is listed or the runs
    together are not nested, so a rank's digits are not unique)."""
    if shape.inner is None:
        return None
    runs = sorted(
        [(size, stride, False) for size, stride in shape.inner]
        + [(size, stride, True) for size, stride in shape.outer],
        key=lambda run: run[1],
    )
    span = 0
    for size, stride, _ in runs:
        if stride <= span:
            return None
        span += (size - 1) * stride
    return tuple(reversed(runs))


def _base(value: int, digits: Digits) -> int | None:
    """The outer part of ``value`` (its group's first rank less the offset), or None when
    ``value`` is no point of ``digits`` (the rank is in no group of the family). Nested runs:
    each digit is the quotient by its stride, taken from the outermost run in."""
    if value < 0:
        return None
    base = 0
    for size, stride, outer in digits:
        digit = value // stride
        if digit >= size:
            return None
        value -= digit * stride
        if outer:
            base += digit * stride
    return base if value == 0 else None


@attrs.frozen
class _Windows:
    """Where the groups of one shape have two or more ranks in a window of ``width``
    consecutive ranks; build it with :meth:`of`.

    Algorithm: split the group's offsets ``X = L + H``, ``H`` the outermost runs whose copies
    lie ``width`` or more apart (:func:`_gaps`), so no window holds ranks of two copies. A
    group ``base + X`` then has two or more ranks in the window from rank ``r`` exactly when,
    for one copy ``h`` of ``H``, ``r - (base + h)`` lies in :attr:`starts`, the window starts
    that hold two or more points of ``L`` (:func:`_run_starts`). The ranks ``base + h`` are
    ``offset`` plus the points of the outer runs and ``H`` together (:attr:`runs`, nested, one
    point per group and copy), so the groups a window holds are the points of :attr:`runs` in
    ``len(starts)`` intervals, counted by :func:`_at_most`.
    """

    starts: tuple[Interval, ...]
    runs: Runs
    offset: int
    classes: dict[int, int] = attrs.field(factory=dict, eq=False, repr=False)
    """Counts per offset class (:meth:`count`)."""

    @classmethod
    def of(cls, shape: Shape, width: int) -> _Windows | None:
        """The windows of ``width`` for ``shape``; None when the shape needs the rank walk."""
        if shape.inner is None:
            pairs = pairwise(sorted(shape.explicit))
            low: list[Interval] | None = _merged(
                (b - width + 1, a) for a, b in pairs if b - a < width
            )
            high: Runs = ()
        else:
            gaps = _gaps(shape.inner)
            if any(gap < 1 for gap in gaps):
                return None
            cut = len(gaps)
            while cut and gaps[cut - 1] >= width:
                cut -= 1
            low, high = _run_starts(shape.inner[:cut], width), shape.inner[cut:]
        runs = normal((*shape.outer, *high))
        if low is None or len(low) > _INTERVAL_LIMIT or min(_gaps(runs), default=1) < 1:
            return None
        return cls(tuple(low), runs, shape.offset)

    def count(self, first: int) -> int:
        """How many groups have two or more ranks in the window from rank ``first``.

        The count is ``_at_most(at - low) - _at_most(at - high - 1)`` summed over the
        intervals of :attr:`starts`, ``at = first - offset``. With ``(size, stride)`` the
        outermost run and ``n`` the points of the others, ``_at_most(x + stride) = _at_most(x) +
        n`` for every ``x`` in ``-1 .. (size - 2) * stride`` (one point per point of the other
        runs lies in ``x + 1 .. x + stride``). So two windows whose ``first`` is equal modulo
        ``stride`` (an offset class), with every bound ``at - low``, ``at - high - 1`` in
        ``-1 .. (size - 1) * stride``, hold as many groups: the class is counted once.
        """
        if not self.starts:
            return 0
        runs, at = self.runs, first - self.offset
        key = None
        if runs:
            size, stride = runs[-1]
            if self.starts[-1][1] <= at <= self.starts[0][0] + (size - 1) * stride:
                key = at % stride
                if key in self.classes:
                    return self.classes[key]
        count = sum(
            _at_most(at - low, runs) - _at_most(at - high - 1, runs) for low, high in self.starts
        )
        if key is not None:
            self.classes[key] = count
        return count

    def points(self, first: int) -> list[int]:
        """One rank of each group with two or more ranks in the window from rank ``first``."""
        at = first - self.offset
        return [
            self.offset + point(position, self.runs)
            for low, high in self.starts
            for position in range(_at_most(at - high - 1, self.runs), _at_most(at - low, self.runs))
        ]


def _run_starts(runs: Runs, width: int) -> list[Interval] | None:
    """The starts ``s`` of the windows ``s .. s + width - 1`` that hold two or more points of
    nested ``runs``, merged; None past :data:`_INTERVAL_LIMIT` intervals.

    Built run by run: run ``(size, stride)`` repeats the starts of the runs below it ``size``
    times ``stride`` apart, and adds the windows that hold the last point of one copy and the
    first of the next (when those are less than ``width`` apart); copies whose starts form one
    interval that reaches the next copy's are joined without listing them.
    """
    starts: list[Interval] = []
    below = 0  # the largest point of the runs so far
    for size, stride in runs:
        block = _merged(
            [*starts, (stride - width + 1, below)] if stride - below < width else starts
        )
        last = [(a + (size - 1) * stride, z + (size - 1) * stride) for a, z in starts]
        if len(block) == 1 and block[0][1] + 1 >= block[0][0] + stride:
            copies = [(block[0][0], block[0][1] + (size - 2) * stride)]
        elif (size - 1) * len(block) <= _INTERVAL_LIMIT:
            copies = [(a + c * stride, z + c * stride) for c in range(size - 1) for a, z in block]
        else:
            return None
        starts = _merged(copies + last)
        below += (size - 1) * stride
    return starts if len(starts) <= _INTERVAL_LIMIT else None


def _gaps(runs: Runs) -> list[int]:
    """Per run, its stride less the largest point of the runs below it: the least distance
    between two points whose highest differing digit is that run's (all positive: nested)."""
    gaps = []
    below = 0
    for size, stride in runs:
        gaps.append(stride - below)
        below += (size - 1) * stride
    return gaps


def _merged(intervals: Iterable[Interval]) -> list[Interval]:
    """``intervals`` sorted, those that overlap or touch joined."""
    joined: list[Interval] = []
    for low, high in sorted(intervals):
        if joined and low <= joined[-1][1] + 1:
            joined[-1] = (joined[-1][0], max(joined[-1][1], high))
        else:
            joined.append((low, high))
    return joined


def _at_most(limit: int, runs: Runs) -> int:
    """How many points of nested ``runs`` are at most ``limit``: one more than the position of
    the largest, whose digits are taken greedily from the outermost run in."""
    if limit < 0:
        return 0
    position, scale = 0, volume(runs)
    for size, stride in reversed(runs):
        scale //= size
        digit = min(size - 1, limit // stride)
        position += digit * scale
        limit -= digit * stride
    return position + 1


def _spans(ranks: Sequence[int]) -> list[Span]:
    """Ascending ``ranks`` as spans of consecutive ranks."""
    if isinstance(ranks, range) and ranks.step == 1:
        return [(ranks.start, ranks.stop)] if ranks else []
    spans: list[Span] = []
    for rank in ranks:
        if spans and spans[-1][1] == rank:
            spans[-1] = (spans[-1][0], rank + 1)
        else:
            spans.append((rank, rank + 1))
    return spans


def _identity(topo: Topology, kind: str, index: int) -> tuple[int, ...]:
    """What makes a listed group one communicator where an irregular kind may repeat another
    kind's group: its ranks (the caller lists only groups of at most :data:`DOMAIN_SAMPLE`)."""
    return tuple(topo.groups(kind)[index])


def _busiest(counts: Iterable[tuple[int, int]], empty: int) -> tuple[int, int]:
    """``(most, domain)`` of ``(domain, count)`` pairs, the smallest domain on ties."""
    best = min(((-n, d) for d, n in counts), default=(0, empty))
    return -best[0], best[1] if best[0] else empty


def nvls_groups(topo: Topology, domain_of: Sequence[int], **plan: Any) -> tuple[int, int, bool]:
    """The most communicators with two or more ranks in one NVLink domain, that domain's label,
    and True (exact): every rank of every domain is measured, and equal rank sets (an
    ``intra-dp-cp`` chunk that is also a cp group) are one communicator, as the adapter makes
    them, unless ``separate``, ``independent`` or ``pg_options`` (the keywords of
    :func:`families`) give them communicators of their own.

    ``domain_of[r]`` labels the NVLink domain of global rank ``r`` (``rank_offset`` included).
    Time: one pass over the labels, then per family the domains' offset classes (a domain whose
    ranks are not consecutive, or an irregular kind, walks its ranks; :func:`_domain_counts`).
    """
    chosen = families(topo, **plan)
    start = topo.rank_offset
    empty = domain_of[start]
    per_domain: dict[int, list[Span]] = {}
    for label, run in groupby(domain_of[start : start + topo.world_size]):
        end = start + sum(1 for _ in run)
        spans = per_domain.setdefault(label, [])
        spans.append((start, end))
        start = end
    counts = _domain_counts(topo, list(per_domain.values()), chosen)
    most, domain = _busiest(zip(per_domain, counts, strict=True), empty)
    return most, domain, True


def nvls_groups_sampled(
    topo: Topology, domain_size: int, domains: Sequence[int], **plan: Any
) -> tuple[int, int, bool]:
    """:func:`nvls_groups` on consecutive domains of ``domain_size`` ranks, measured only on
    ``domains`` (their indices; for a world too large to walk) and, in a domain of more than
    :data:`DOMAIN_SAMPLE` ranks, only on its first ones (then a lower bound); exact is False.

    Each domain is counted from the group shapes (:func:`_domain_counts`), so the time is the
    kinds times the domains measured, whatever the world size; an irregular kind looks up the
    group of each rank measured (:meth:`Topology.group_index`).
    """
    end = topo.rank_offset + topo.world_size
    spans = []
    for domain in domains:
        start = max(domain * domain_size, topo.rank_offset)
        spans.append((domain, range(start, min((domain + 1) * domain_size, end))))
    return nvls_groups_in(topo, spans, **plan)


def nvls_groups_in(
    topo: Topology, spans: Sequence[tuple[int, Sequence[int]]], **plan: Any
) -> tuple[int, int, bool]:
    """:func:`nvls_groups` measured only on the domains of ``spans`` (``(label, its ascending
    ranks)`` pairs), each on at most its first :data:`DOMAIN_SAMPLE` ranks; exact is False."""
    chosen = families(topo, **plan)
    measured = _domain_counts(topo, [_spans(ranks[:DOMAIN_SAMPLE]) for _, ranks in spans], chosen)
    # One count per span by construction, so strict never fires: dropping it changes nothing.
    counts = list(zip((domain for domain, _ in spans), measured, strict=True))  # pragma: no mutate
    found = [(d, n) for d, n in counts if n]
    if not found:
        return 0, spans[0][0] if spans else 0, False
    best = max(n for _, n in found)
    return best, next(d for d, n in counts if n == best), False
