"""The NVLS count per group shape against its earlier self: the rank walk it replaced.

``nvls_groups``, ``nvls_groups_in`` and ``nvls_groups_sampled`` once counted each NVLink domain
by looking up the group of every rank of it for every family (``_busy``: a ``Counter`` per domain
and family, O(ranks x kinds)); the reference below is that code, kept verbatim (the section
between the rules) so that the count per group shape can be checked against it: on generated
layouts (rank offsets, distributed-optimizer instances, hierarchical cp levels, ep/etp, GTP,
embedding stages), consecutive domains of every size, any labels (domains of several spans),
sampled domains with the sample cut low, and the ``separate`` / ``independent`` / ``pg_options``
plans. :func:`reference_counts` puts the reference back under ``check`` for the benchmark
(``benchmarks/bench_nvls.py``).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from itertools import pairwise
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Topology
from topology._megatron.shapes import shape_of
from topology._preflight import budget
from topology._preflight import check as check_module
from topology._preflight.budget import Token, families
from topology.strategies import topologies

DOMAIN_SAMPLE = budget.DOMAIN_SAMPLE

# -- the reference: budget.py before the count per group shape, verbatim ------------------------


def _busy(topo: Topology, ranks: Iterable[int], chosen: list[tuple[str, Token]]) -> int:
    """How many communicators of ``chosen`` hold two or more of ``ranks`` (ascending ranks of
    the layout), counting each rank's group by the kind table's lookup; time O(ranks x kinds)."""
    by_ranks = any(shape_of(topo, kind) is None for kind, _ in chosen)
    ranks = list(ranks)
    found: set[object] = set()
    for kind, token in chosen:
        members: Counter[int] = Counter(
            topo.group_index(rank, kind) for rank in ranks if topo.has_group(rank, kind)
        )
        for index, n in members.items():
            if n > 1:
                found.add((token, _identity(topo, kind, index, by_ranks)))
    return len(found)


def _identity(topo: Topology, kind: str, index: int, by_ranks: bool) -> object:
    """What makes a group one communicator: its ranks where an irregular kind may repeat another
    kind's group (and the group is small enough to list), else its family and index."""
    if by_ranks and topo.size(kind) <= DOMAIN_SAMPLE:
        return tuple(topo.groups(kind)[index])
    shape = shape_of(topo, kind)
    return (kind if shape is None else shape.key, index)


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
    """
    chosen = families(topo, **plan)
    per_domain: dict[int, list[int]] = {}
    for rank in range(topo.rank_offset, topo.rank_offset + topo.world_size):
        per_domain.setdefault(domain_of[rank], []).append(rank)
    counts = ((d, _busy(topo, ranks, chosen)) for d, ranks in per_domain.items())
    most, domain = _busiest(counts, domain_of[topo.rank_offset])
    return most, domain, True


def nvls_groups_sampled(
    topo: Topology, domain_size: int, domains: Sequence[int], **plan: Any
) -> tuple[int, int, bool]:
    """:func:`nvls_groups` on consecutive domains of ``domain_size`` ranks, measured only on
    ``domains`` (their indices; for a world too large to walk) and, in a domain of more than
    :data:`DOMAIN_SAMPLE` ranks, only on its first ones (then a lower bound); exact is False.

    Each rank's group is found by the kind table's lookup (:meth:`Topology.group_index`), so
    the time is the ranks measured times the kinds, whatever the world size.
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
    counts = []
    for domain, ranks in spans:
        counts.append((domain, _busy(topo, ranks[:DOMAIN_SAMPLE], chosen)))
    found = [(d, n) for d, n in counts if n]
    if not found:
        return 0, spans[0][0] if spans else 0, False
    best = max(n for _, n in found)
    return best, next(d for d, n in counts if n == best), False


# -- end of the reference -------------------------------------------------------------------------


@contextlib.contextmanager
def reference_counts() -> Iterator[None]:
    """``check`` (and so ``plan``) counting NVLS groups with the reference."""
    with (
        mock.patch.object(check_module, "nvls_groups", nvls_groups),
        mock.patch.object(check_module, "nvls_groups_in", nvls_groups_in),
        mock.patch.object(check_module, "nvls_groups_sampled", nvls_groups_sampled),
    ):
        yield


@contextlib.contextmanager
def _limits(sample: int, intervals: int) -> Iterator[None]:
    """Both counts with the per-domain sample cut to ``sample`` ranks, the new one with at most
    ``intervals`` window intervals before it walks the ranks."""
    with (
        mock.patch.object(budget, "DOMAIN_SAMPLE", sample),
        mock.patch(f"{__name__}.DOMAIN_SAMPLE", sample),
        mock.patch.object(budget, "_INTERVAL_LIMIT", intervals),
    ):
        yield


UNEVEN = ((2, 3, 2), (2, 3, 3), (2, 6, 4), (3, 2, 2), (3, 4, 3), (3, 4, 6), (4, 3, 6), (4, 6, 8))
"""``(cp, dp, dist_opt_instances)`` whose chunks cut a dp-cp group unevenly when pp lies between
cp and dp in the order: the chunk kinds are irregular (no shape) and may repeat other groups."""


@st.composite
def uneven_layouts(draw: st.DrawFn) -> Topology:
    """Layouts with irregular kinds (about half of them), which the strategies rarely draw."""
    cp, dp, instances = draw(st.sampled_from(UNEVEN))
    tp, pp = draw(st.sampled_from([1, 2])), draw(st.sampled_from([2, 3]))
    order = draw(st.sampled_from([["cp", "pp", "dp"], ["dp", "pp", "cp"]]))
    for token in ("tp", "ep"):
        order.insert(draw(st.integers(0, len(order))), token)
    return Topology(
        tp * cp * pp * dp,
        tp=tp,
        cp=cp,
        pp=pp,
        dist_opt_instances=instances,
        order="-".join(order),
        rank_offset=draw(st.integers(0, 5)),
    )


LAYOUTS = st.one_of(
    uneven_layouts(),
    topologies(max_world_size=64),
    topologies(max_world_size=256, max_size=16),
    topologies(max_world_size=64, gtp=True),
    topologies(max_world_size=48, kinds=["intra-dist-opt"]),
    topologies(max_world_size=64, kinds=["hcp-1"]),
)
"""Layouts of every family the kind table has, small enough for the reference to walk."""

LIMITS = st.tuples(st.sampled_from([DOMAIN_SAMPLE, 1, 2, 3, 5, 8]), st.sampled_from([64, 1, 2]))
"""``(DOMAIN_SAMPLE, _INTERVAL_LIMIT)``: the real ones, or cut low to reach the edge cases."""


@st.composite
def plans(draw: st.DrawFn, topo: Topology) -> dict[str, Any]:
    """``separate``, ``independent`` and ``pg_options`` over ``topo``'s kinds; the options
    objects come from a pool of two, so some kinds share one."""
    kinds = st.lists(st.sampled_from(topo.kinds), unique=True, max_size=3)
    pool = (object(), object())
    options = draw(st.dictionaries(st.sampled_from(topo.kinds), st.sampled_from(pool)))
    return {
        "separate": tuple(draw(kinds)),
        "independent": tuple(draw(kinds)),
        "pg_options": options or draw(st.sampled_from([None, {}])),
    }


def _ascending(data: st.DataObject, ranks: range) -> list[int]:
    """An ascending subset of ``ranks``: runs of consecutive ranks with holes."""
    size = len(ranks)
    kept = data.draw(st.lists(st.booleans(), min_size=size, max_size=size), label="kept")
    return [rank for rank, keep in zip(ranks, kept, strict=True) if keep]


@settings(max_examples=150, deadline=None)
@given(LAYOUTS, st.integers(1, 80), LIMITS, st.data())
def test_consecutive_domains_count_as_the_reference(
    topo: Topology, size: int, limits: tuple[int, int], data: st.DataObject
) -> None:
    """Domains of ``size`` consecutive ranks, every one measured, then a sorted subset sampled."""
    plan = data.draw(plans(topo), label="plan")
    end = topo.rank_offset + topo.world_size
    labels = [rank // size for rank in range(end)]
    every = st.integers(0, end // size + 1)
    domains = data.draw(st.lists(every, unique=True).map(sorted), label="domains")
    with _limits(*limits):
        assert budget.nvls_groups(topo, labels, **plan) == nvls_groups(topo, labels, **plan)
        new = budget.nvls_groups_sampled(topo, size, domains, **plan)
        assert new == nvls_groups_sampled(topo, size, domains, **plan)


@settings(max_examples=150, deadline=None)
@given(LAYOUTS, LIMITS, st.data())
def test_any_labels_count_as_the_reference(
    topo: Topology, limits: tuple[int, int], data: st.DataObject
) -> None:
    """Hosts of a few ranks each, labelled with a few domains in any order (a domain may be
    several runs of hosts) and, once more, any label per rank."""
    plan = data.draw(plans(topo), label="plan")
    end = topo.rank_offset + topo.world_size
    gpus = data.draw(st.integers(1, 9), label="gpus")
    count = -(-end // gpus)
    hosts = data.draw(st.lists(st.integers(0, 4), min_size=count, max_size=count), label="hosts")
    by_host = [hosts[rank // gpus] for rank in range(end)]
    by_rank = data.draw(st.lists(st.integers(0, 3), min_size=end, max_size=end), label="labels")
    with _limits(*limits):
        for labels in (by_host, by_rank):
            assert budget.nvls_groups(topo, labels, **plan) == nvls_groups(topo, labels, **plan)


@settings(max_examples=150, deadline=None)
@given(LAYOUTS, LIMITS, st.data())
def test_chosen_spans_count_as_the_reference(
    topo: Topology, limits: tuple[int, int], data: st.DataObject
) -> None:
    """``nvls_groups_in`` on labelled ascending rank lists (ranges, or lists with holes)."""
    plan = data.draw(plans(topo), label="plan")
    end = topo.rank_offset + topo.world_size
    spans: list[tuple[int, Sequence[int]]] = []
    for label in range(data.draw(st.integers(0, 4), label="domains")):
        first = data.draw(st.integers(topo.rank_offset, end), label="first")
        ranks = range(first, data.draw(st.integers(first, end), label="end"))
        spans.append((label, ranks if data.draw(st.booleans()) else _ascending(data, ranks)))
    with _limits(*limits):
        assert budget.nvls_groups_in(topo, spans, **plan) == nvls_groups_in(topo, spans, **plan)


@settings(max_examples=100, deadline=None)
@given(uneven_layouts(), st.integers(1, 30), st.data())
def test_irregular_layouts_count_as_the_reference(
    topo: Topology, size: int, data: st.DataObject
) -> None:
    """Irregular kinds that may repeat other groups: whole domains of ``size``, the same
    sampled, and hosts of ``size`` ranks under a few domain labels."""
    plan = data.draw(plans(topo), label="plan")
    end = topo.rank_offset + topo.world_size
    labels = [rank // size for rank in range(end)]
    count = -(-end // size)
    hosts = data.draw(st.lists(st.integers(0, 2), min_size=count, max_size=count), label="hosts")
    sample = data.draw(st.sampled_from([DOMAIN_SAMPLE, 2, 3, 4]), label="sample")
    with _limits(sample, 64):
        for domain_of in (labels, [hosts[label] for label in labels]):
            new = budget.nvls_groups(topo, domain_of, **plan)
            assert new == nvls_groups(topo, domain_of, **plan)
        new = budget.nvls_groups_sampled(topo, size, range(count), **plan)
        assert new == nvls_groups_sampled(topo, size, range(count), **plan)


def test_large_layouts_count_as_the_reference() -> None:
    """The benchmark's layouts and wider domains (72, an NVL72 rack; 2,048 sampled)."""
    cases = [
        (Topology(4096, tp=8, pp=8), 8),
        (Topology(4096, tp=4, cp=2, pp=8), 8),
        (Topology(4096, tp=8, cp=2, pp=8, ep=4, etp=2), 72),
        (Topology(4608, tp=4, pp=4, rank_offset=64), 72),
    ]
    for topo, size in cases:
        end = topo.rank_offset + topo.world_size
        labels = [rank // size for rank in range(end)]
        assert budget.nvls_groups(topo, labels) == nvls_groups(topo, labels)
        domains = [0, end // 2048 // 2, (end - 1) // 2048]
        with _limits(1024, 64):
            new = budget.nvls_groups_sampled(topo, 2048, domains)
            assert new == nvls_groups_sampled(topo, 2048, domains)


EXPLICIT = (
    Topology(12, pp=6, embedding_stages=(0, 1, 3), position_embedding_stages=(0, 2, 3, 5)),
    Topology(48, tp=2, cp=2, pp=6, embedding_stages=(0, 1, 3, 4), rank_offset=3),
    Topology(
        48, cp=2, pp=4, dist_opt_instances=4, order="tp-cp-ep-pp-dp", embedding_stages=(0, 1, 3)
    ),
)
"""Embedding stages that are no run (their offsets listed); the last with irregular kinds too."""


def test_listed_offsets_count_as_the_reference() -> None:
    """Groups whose offsets are listed, on domains of every size, whole and sampled."""
    for topo in EXPLICIT:
        end = topo.rank_offset + topo.world_size
        for size in range(1, end + 1):
            labels = [rank // size for rank in range(end)]
            assert budget.nvls_groups(topo, labels) == nvls_groups(topo, labels)
            domains = list(range(end // size + 1))
            with _limits(3, 64):
                new = budget.nvls_groups_sampled(topo, size, domains)
                assert new == nvls_groups_sampled(topo, size, domains)


@settings(max_examples=60, deadline=None)
@given(LAYOUTS, st.integers(1, 20))
def test_windows_count_the_groups_they_hold(topo: Topology, width: int) -> None:
    """Per regular kind, the groups a window holds two or more ranks of (counted, and one rank
    of each listed), by brute force, for windows from every rank, those that reach past the
    layout's ends included: the count per offset class holds only where its bounds allow."""
    end = topo.rank_offset + topo.world_size
    for kind in topo.kinds:
        shape = shape_of(topo, kind)
        windows = None if shape is None else budget._Windows.of(shape, width)
        if windows is None:
            continue
        groups = [set(group) for group in topo.groups(kind)]
        for first in range(topo.rank_offset - width, end + 1):
            inside = set(range(first, first + width))
            expected = [g for g in groups if len(g & inside) > 1]
            assert windows.count(first) == len(expected), (kind, first)
            held = [next(g for g in expected if rank in g) for rank in windows.points(first)]
            assert len(held) == len(expected) and all(g in held for g in expected), (kind, first)


# -- the parts of the count per group shape, each against its contract ---------------------------

REGULAR = (
    Topology(576, tp=8, pp=8),
    Topology(512, tp=4, cp=2, pp=8),
    Topology(1024, tp=8, cp=2, pp=8, ep=4, etp=2),
    Topology(640, tp=4, pp=4, rank_offset=64),
    Topology(64, tp=2, cp=2, pp=2, order="tp-cp-dp-pp"),
    *EXPLICIT[:2],
)
"""Layouts whose every kind has a group shape (runs, or listed embedding offsets)."""


def test_regular_kinds_never_walk_the_ranks() -> None:
    """On NVL8 and NVL72 domains every family of a regular layout is counted from its windows,
    its runs or its listed offsets alike (the module's promise: never rank by rank), and the
    count is the reference's."""

    def walked(*_: object) -> list[int]:
        raise AssertionError("a regular family walked the ranks")

    for topo in REGULAR:
        end = topo.rank_offset + topo.world_size
        for size in (8, 72):
            labels = [rank // size for rank in range(end)]
            with mock.patch.object(budget, "_walked", walked):
                new = budget.nvls_groups(topo, labels)
            assert new == nvls_groups(topo, labels), (topo, size)


def _windows(topo: Topology, width: int) -> Iterator[tuple[str, budget._Windows]]:
    """``(kind, windows of width)`` for every kind of ``topo`` that has them."""
    for kind in topo.kinds:
        shape = shape_of(topo, kind)
        windows = None if shape is None else budget._Windows.of(shape, width)
        if windows is not None:
            yield kind, windows


def test_window_starts_are_merged_intervals() -> None:
    """The starts of every shape's windows are ascending intervals, none empty, none touching
    the next (listed offsets as far apart as the window is wide add none)."""
    for topo in (*REGULAR[4:], EXPLICIT[2]):
        for width in range(1, 14):
            for kind, windows in _windows(topo, width):
                starts = windows.starts
                assert all(low <= high for low, high in starts), (kind, width, starts)
                assert all(b[0] > a[1] + 1 for a, b in pairwise(starts)), (kind, width, starts)


def test_count_serves_each_offset_class_from_one_count() -> None:
    """A window's count is cached per offset class exactly where ``count``'s doc says two
    windows of a class hold as many groups (``starts[-1][1] <= at <= starts[0][0] + (size - 1)
    * stride``, ``at`` from the offset): a planted count is served there and only there, a count
    inside is stored under its class, one outside is not."""
    for topo in (*REGULAR[4:], Topology(96, tp=2, cp=3, pp=2, order="tp-dp-cp-pp")):
        for width in range(1, 14):
            for kind, windows in _windows(topo, width):
                if not windows.starts or not windows.runs:
                    continue
                size, stride = windows.runs[-1]
                lowest = windows.starts[-1][1]
                highest = windows.starts[0][0] + (size - 1) * stride
                for at in range(lowest - 2 * stride, highest + 2 * stride + 1):
                    inside = lowest <= at <= highest
                    first = at + windows.offset
                    windows.classes.clear()
                    counted = windows.count(first)
                    assert windows.classes == ({at % stride: counted} if inside else {}), kind
                    windows.classes[at % stride] = -1
                    assert (windows.count(first) == -1) == inside, (kind, width, at)


def test_merged_joins_overlapping_and_touching_intervals() -> None:
    """Goldens: intervals sorted, those that overlap or touch (``high + 1 == low``) joined."""
    assert budget._merged([]) == []
    assert budget._merged([(4, 6), (0, 3)]) == [(0, 6)]
    assert budget._merged([(0, 3), (5, 6), (2, 4)]) == [(0, 6)]
    assert budget._merged([(0, 2), (4, 6), (5, 5)]) == [(0, 2), (4, 6)]


def test_spans_of_ascending_ranks() -> None:
    """Goldens: ranges of any step, lists with holes, and empty ones as spans."""
    assert budget._spans(range(3, 9)) == [(3, 9)]
    assert budget._spans(range(3, 3)) == []
    assert budget._spans(range(2, 9, 2)) == [(2, 3), (4, 5), (6, 7), (8, 9)]
    assert budget._spans(range(0, 9, 3)) == [(0, 1), (3, 4), (6, 7)]
    assert budget._spans([1, 2, 3, 5, 7, 8]) == [(1, 4), (5, 6), (7, 9)]
    assert budget._spans([]) == []


def test_stepped_ranges_count_as_the_reference() -> None:
    """``nvls_groups_in`` on ranges of step 2 and 3 (every other rank: no tp pair in them)."""
    topo = Topology(48, tp=2, cp=2, pp=3, rank_offset=3)
    spans: list[tuple[int, Sequence[int]]] = [
        (label, range(first, 51, step))
        for label, (first, step) in enumerate([(3, 2), (4, 2), (3, 3), (10, 4), (5, 1)])
    ]
    for chosen in (spans, spans[:4], spans[2:4], [(0, range(7, 7))]):
        assert budget.nvls_groups_in(topo, chosen) == nvls_groups_in(topo, chosen), chosen
