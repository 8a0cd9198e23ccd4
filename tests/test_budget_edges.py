"""NVLS group counts at their edges: the busiest domain and its label against brute force, on
any labelling of ranks (not only consecutive domains), on a subset of domains, with the per-domain
sample cut low, and on a layout whose irregular kinds repeat each other's groups.

The brute force shares no code with :mod:`topology._preflight.budget`: per domain it collects the
distinct rank tuples of every group of every kind with two or more ranks there, and takes the
largest collection, the smallest domain on ties. The sampled count is checked by patching
``DOMAIN_SAMPLE`` low instead of building worlds of more than 4,096 ranks per domain.
"""

from __future__ import annotations

from collections.abc import Sequence
from unittest import mock

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from topology import Topology
from topology._megatron.shapes import shape_of
from topology._preflight import budget
from topology._preflight.budget import nvls_groups, nvls_groups_sampled
from topology.strategies import topologies


def _distinct(topo: Topology, ranks: Sequence[int]) -> int:
    """Distinct rank tuples, over every group of every kind, with two or more of ``ranks``."""
    inside = set(ranks)
    found = set()
    for kind in topo.kinds:
        for group in topo.groups(kind):
            if len(inside.intersection(group)) > 1:
                found.add(tuple(group))
    return len(found)


def _busiest(counts: dict[int, int]) -> tuple[int, int]:
    """``(most, domain)``: the largest count, the smallest domain on ties."""
    domain = min(counts, key=lambda d: (-counts[d], d))
    return counts[domain], domain


def _window(topo: Topology, domain: int, size: int, sample: int) -> range:
    """The ranks of the layout in consecutive domain ``domain``, cut to its first ``sample``."""
    end = topo.rank_offset + topo.world_size
    ranks = [r for r in range(domain * size, (domain + 1) * size) if topo.rank_offset <= r < end]
    return range(ranks[0], ranks[0] + min(len(ranks), sample)) if ranks else range(0)


def _expected_sampled(
    topo: Topology, size: int, domains: Sequence[int], sample: int
) -> tuple[int, int, bool]:
    if not domains:
        return 0, 0, False
    counts = {d: _distinct(topo, _window(topo, d, size, sample)) for d in domains}
    return (*_busiest(counts), False)


IRREGULAR = Topology(24, cp=2, pp=2, dist_opt_instances=4, order="tp-cp-ep-pp-dp")
"""dp-cp groups of 12 split into 4 uneven chunks of 3: intra-dp-cp and intra-edp have no shape
and equal groups (0, 1, 4), (5, 8, 9), ...; they must count as one communicator."""

# -- laws -----------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(topologies(max_world_size=32), st.data())
def test_nvls_groups_on_any_labels_equal_brute_force(topo: Topology, data: st.DataObject) -> None:
    """Any domain label per rank: the busiest domain, its label (smallest on ties), exact."""
    end = topo.rank_offset + topo.world_size
    labels = data.draw(st.lists(st.integers(0, 3), min_size=end, max_size=end), label="labels")
    counts = {d: _distinct(topo, [r for r in range(end) if labels[r] == d]) for d in set(labels)}
    counts = {d: n for d, n in counts.items() if n}
    expected = _busiest(counts) if counts else (0, labels[topo.rank_offset])
    assert nvls_groups(topo, labels) == (*expected, True)


@settings(max_examples=40, deadline=None)
@given(topologies(max_world_size=32), st.sampled_from([1, 2, 3, 4, 8]), st.data())
def test_sampled_nvls_groups_on_chosen_domains_equal_brute_force(
    topo: Topology, size: int, data: st.DataObject
) -> None:
    """Consecutive domains, any sorted subset measured: the busiest, the first on ties, inexact."""
    end = topo.rank_offset + topo.world_size
    every = range(-(-end // size) + 1)  # one domain past the end holds no rank
    domains = data.draw(st.lists(st.sampled_from(every), unique=True).map(sorted), label="domains")
    expected = _expected_sampled(topo, size, domains, budget.DOMAIN_SAMPLE)
    assert nvls_groups_sampled(topo, size, domains) == expected


@settings(max_examples=40, deadline=None)
@given(topologies(max_world_size=32), st.sampled_from([2, 4, 6, 8, 16]), st.integers(1, 6))
def test_a_large_domain_is_measured_on_its_first_ranks(
    topo: Topology, size: int, sample: int
) -> None:
    """With the sample cut to a few ranks, each domain counts the groups of its first ones."""
    assume(all(shape_of(topo, kind) is not None for kind in topo.kinds))
    end = topo.rank_offset + topo.world_size
    domains = list(range(-(-end // size)))
    with mock.patch.object(budget, "DOMAIN_SAMPLE", sample):
        found = nvls_groups_sampled(topo, size, domains)
    assert found == _expected_sampled(topo, size, domains, sample)


# -- irregular kinds that repeat each other's groups ----------------------------------------------


@pytest.mark.parametrize("size", [3, 4, 6, 8, 12, 24])
def test_equal_irregular_groups_count_once(size: int) -> None:
    """The exact and the sampled count agree with brute force on IRREGULAR."""
    labels = [r // size for r in range(24)]
    counts = {d: _distinct(IRREGULAR, [r for r in range(24) if labels[r] == d]) for d in labels}
    assert nvls_groups(IRREGULAR, labels) == (*_busiest(counts), True)
    domains = sorted(set(labels))
    assert nvls_groups_sampled(IRREGULAR, size, domains) == (*_busiest(counts), False)


@pytest.mark.parametrize(("size", "sample"), [(3, 3), (6, 3), (12, 3), (24, 5), (12, 8)])
def test_equal_irregular_groups_count_once_in_a_sample(size: int, sample: int) -> None:
    """Cut to ``sample`` ranks (at least the 3 of a repeated group), still one communicator each."""
    domains = list(range(24 // size))
    with mock.patch.object(budget, "DOMAIN_SAMPLE", sample):
        found = nvls_groups_sampled(IRREGULAR, size, domains)
    assert found == _expected_sampled(IRREGULAR, size, domains, sample)


def test_a_three_rank_sample_of_irregular_groups_by_hand() -> None:
    """Ranks 0, 1, 2 of IRREGULAR hold two or more ranks of: cp (0, 1), tp-pp (0, 2), the dp-cp
    group of rank 0, the chunk (0, 1, 4) of intra-dp-cp and intra-edp (one communicator) and the
    intra-dist-opt group (0, 1, 2, 3, 4, 6): 5; dp, inter-edp and edp hold one rank each."""
    with mock.patch.object(budget, "DOMAIN_SAMPLE", 3):
        assert nvls_groups_sampled(IRREGULAR, 24, [0]) == (5, 0, False)


# -- golden values --------------------------------------------------------------------------------


def test_two_stage_layout_by_hand() -> None:
    """tp2 pp2 dp4 on 16 ranks, domains of 8 (one pipeline stage each). In domain 0: 4 tp pairs,
    2 dp groups, 1 tp-dp group, 4 tp-pp groups (2 ranks each in the stage); pp and embedding
    groups hold one rank per stage. 4 + 2 + 1 + 4 = 11, and domain 1 ties, so domain 0."""
    topo = Topology(16, tp=2, pp=2)
    assert nvls_groups(topo, [r // 8 for r in range(16)]) == (11, 0, True)
    assert nvls_groups_sampled(topo, 8, [0, 1]) == (11, 0, False)
    assert nvls_groups_sampled(topo, 8, [1]) == (11, 1, False)


def test_no_group_with_two_ranks_in_a_domain_reports_the_first_rank_domain() -> None:
    """dp4 at rank_offset 2, every rank its own domain: nothing shares one; rank 2's label."""
    topo = Topology(4, rank_offset=2)
    assert nvls_groups(topo, [7, 8, 9, 10, 11, 12]) == (0, 9, True)
    assert nvls_groups_sampled(topo, 1, [2, 3, 4, 5]) == (0, 2, False)


def test_no_domain_measured_counts_nothing() -> None:
    """An empty list of domains measures nothing: 0 groups, domain 0, inexact."""
    assert nvls_groups_sampled(Topology(8, tp=2), 4, []) == (0, 0, False)
