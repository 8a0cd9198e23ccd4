"""Edges of the core that mutation testing found untested: each test pins one behaviour.

Expected values come from enumeration (nodes filled GPU by GPU, a rank's pp group found by
scanning every group), never from the formulas of the code under test.
"""

from __future__ import annotations

import itertools
import re
import sys
from collections import Counter
from collections.abc import Iterator, Sequence

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Cluster, Grid, Topology, TopologyError, check, hierarchical_groups
from topology._args import prime_factors, show
from topology._megatron.kinds import DENSE_KINDS, EXPERT_KINDS, canonical_kind
from topology._megatron.pipeline import MAX_LAYERS
from topology._preflight.findings import _REPR_MESSAGE, Finding
from topology.strategies import grids, topologies

BUDGET = settings.default.max_examples


@settings(max_examples=BUDGET)
@given(st.integers(1, 6), st.none() | st.integers(1, 9), st.integers(1, 4))
def test_cluster_places_ranks_gpu_by_gpu(gpus: int, domain: int | None, nodes: int) -> None:
    """node_of, local_gpu and domain_of follow a fill of nodes (and domains) GPU by GPU."""
    cluster = Cluster(gpus, nodes=nodes, nvlink_domain=domain)
    per_domain = gpus if domain is None else domain
    rank = 0
    for node in range(nodes):
        for gpu in range(gpus):
            assert (cluster.node_of(rank), cluster.local_gpu(rank)) == (node, gpu)
            rank += 1
    assert cluster.world_size == rank
    assert cluster.domain_size == per_domain
    rank = 0
    for dom in range(3):
        for _ in range(per_domain):
            assert cluster.domain_of(rank) == dom
            rank += 1


def test_open_cluster_has_no_world_size() -> None:
    """Without a node count the world size is open (None)."""
    assert Cluster(8).world_size is None


@pytest.mark.parametrize("query", ["node_of", "local_gpu", "domain_of"])
@pytest.mark.parametrize("rank", [-1, True, 2.0, "3"])
def test_cluster_rank_queries_reject_non_ranks(query: str, rank: object) -> None:
    """A rank that is not a non-negative int is a TopologyError naming the argument."""
    with pytest.raises(TopologyError, match=r"^rank must be a non-negative int, got "):
        getattr(Cluster(4), query)(rank)


class Huge(Sequence[int]):
    """A sequence whose length does not fit in an index (len() raises OverflowError)."""

    def __len__(self) -> int:
        return sys.maxsize + 1

    def __getitem__(self, index: int) -> int:  # type: ignore[override]
        return index

    def __iter__(self) -> Iterator[int]:
        return iter(())


def test_hierarchical_groups_rejects_a_sequence_too_long_to_measure() -> None:
    """A sequence longer than sys.maxsize is a one-line TopologyError, not an OverflowError."""
    with pytest.raises(TopologyError, match=r"^ranks holds more than \d+ items; give a real group"):
        hierarchical_groups(Huge(), [2])


@settings(max_examples=BUDGET)
@given(topologies(max_world_size=32), st.data())
def test_pipeline_dict_matches_a_scan_of_the_pp_groups(topo: Topology, data: st.DataObject) -> None:
    """Pipeline.to_dict() carries the rank's stage, stages, ends and neighbours of its pp group."""
    rank = data.draw(st.integers(topo.rank_offset, topo.rank_offset + topo.world_size - 1))
    (group,) = [tuple(g) for g in topo.groups("pp") if rank in tuple(g)]
    stage = group.index(rank)
    facts = topo.pipeline(rank).to_dict()
    assert facts["rank"] == rank
    assert facts["stage"] == stage
    assert facts["num_stages"] == len(group)
    assert facts["ranks"] == list(group)
    assert (facts["first"], facts["last"]) == (group[0], group[-1])
    assert (facts["is_first"], facts["is_last"]) == (stage == 0, stage == len(group) - 1)
    following = group[stage + 1] if stage + 1 < len(group) else group[0]
    preceding = group[stage - 1] if stage > 0 else group[-1]
    assert (facts["next"], facts["prev"]) == (following, preceding)
    assert facts["in_embedding"] == (stage in topo.embedding_stages)
    assert facts["in_position_embedding"] == (stage in topo.position_embedding_stages)


@pytest.mark.parametrize("field", ["nodes", "nvlink_domain"])
@pytest.mark.parametrize("value", [0, -2, 1.5, "4"])
def test_cluster_rejects_optional_sizes_that_are_not_sizes(field: str, value: object) -> None:
    """nodes and nvlink_domain, when given, are positive ints; the error names the field."""
    with pytest.raises(TopologyError, match=rf"^{field} must be "):
        Cluster(4, **{field: value})  # type: ignore[arg-type]


@settings(max_examples=BUDGET)
@given(topologies(max_world_size=32), st.data())
def test_rank_info_dict_repeats_coordinates_and_pipeline(
    topo: Topology, data: st.DataObject
) -> None:
    """RankInfo.to_dict() has the dense and expert coordinates and the pipeline's own dict."""
    rank = data.draw(st.integers(topo.rank_offset, topo.rank_offset + topo.world_size - 1))
    info = topo.rank_info(rank)
    facts = info.to_dict()
    assert list(facts) == ["rank", "dense", "expert", "groups", "pipeline"]
    assert facts["dense"] == info.coord("dense")
    assert facts["expert"] == info.coord("expert")
    assert facts["pipeline"] == topo.pipeline(rank).to_dict()


@pytest.mark.parametrize("kind", [5, None, ["tp"], ("tp",), b"tp"])
def test_rank_info_group_rejects_kinds_that_are_not_strings(kind: object) -> None:
    """A kind that is not a string is an unknown kind (TopologyError), whatever its type."""
    info = Topology(8, tp=2, pp=2).rank_info(3)
    with pytest.raises(TopologyError, match=r"^unknown kind .*; valid kinds: "):
        info.group(kind)  # type: ignore[arg-type]


@pytest.mark.parametrize(("pp", "vpp"), [(1, None), (2, None), (2, 4), (4, 2), (3, 3)])
def test_layers_accept_exactly_the_even_splits(pp: int, vpp: int | None) -> None:
    """layers() accepts a layer count iff pp * vpp chunks get the same whole number of layers."""
    topo = Topology(pp * 2, pp=pp, vpp=vpp)
    chunks = (vpp or 1) * pp
    for num_layers in range(1, 3 * chunks + 1):
        even = any(num_layers == chunks * per for per in range(1, num_layers + 1))
        if even:
            assert sum(len(chunk) for chunk in topo.layers(0, num_layers)) * pp == num_layers
        else:
            with pytest.raises(TopologyError, match=rf"use a positive multiple of {chunks}$"):
                topo.layers(0, num_layers)


def test_layers_accept_the_most_layers_and_reject_one_more() -> None:
    """MAX_LAYERS layers are placed; one more is a TopologyError saying it is too many."""
    assert len(Topology(1).layers(0, MAX_LAYERS)[0]) == MAX_LAYERS
    with pytest.raises(
        TopologyError,
        match=rf"^num_layers must be at most {MAX_LAYERS} \(2\*\*20\), the most layers ",
    ):
        Topology(1).layers(0, MAX_LAYERS + 1)


# -- short reprs of user values, findings and reports ---------------------------------------------


def test_show_prints_ints_up_to_192_bits_and_summarises_larger_ones() -> None:
    """Ints of at most 192 bits print in full; larger ones give their approximate digit count."""
    assert show(2**192 - 1) == str(2**192 - 1)
    found = re.fullmatch(r"<int of about (\d+) digits>", show(2**192))
    assert found is not None and abs(int(found[1]) - len(str(2**192))) <= 1
    assert show(10**300) == "<int of about 301 digits>"


class Wordy:
    """An object whose repr is long."""

    def __repr__(self) -> str:
        return "A" * 40 + "B" * 40


class Broken:
    """An object whose repr raises."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_show_cuts_long_object_reprs_in_the_middle() -> None:
    """A long repr keeps equal head and tail around '...' within 60 characters."""
    text = show(Wordy())
    head, _, tail = text.partition("...")
    assert len(text) <= 60 and len(head) == len(tail) >= 25
    assert set(head) == {"A"} and set(tail) == {"B"}
    assert show(Broken()) == "<Broken object>"


def test_finding_repr_keeps_messages_up_to_the_limit() -> None:
    """A message of _REPR_MESSAGE characters is shown whole; one more is cut with an ellipsis."""
    whole = Finding("info", "code", "m" * _REPR_MESSAGE)
    assert repr(whole) == f"Finding('info', 'code', {'m' * _REPR_MESSAGE!r}, ())"
    cut = Finding("info", "code", "m" * (_REPR_MESSAGE + 1))
    assert repr(cut) == f"Finding('info', 'code', {'m' * (_REPR_MESSAGE - 1) + '…'!r}, ())"


def test_finding_repr_shows_16_ranks_and_summarises_more() -> None:
    """Up to 16 example ranks print as a tuple; more print as count, first four and last."""
    assert repr(Finding("error", "c", "m", tuple(range(16)))).endswith(f"{tuple(range(16))})")
    summary = repr(Finding("error", "c", "m", tuple(range(10, 27))))
    assert summary.endswith("<17 ranks: 10, 11, 12, 13, …, 26>)")


def test_finding_repr_cuts_codes_at_80_characters() -> None:
    """A code longer than 80 characters shows its first 80."""
    text = repr(Finding("error", "c" * 100, "m"))
    assert f"{'c' * 80!r}, 'm'" in text


def test_report_repr_lists_twelve_codes_then_counts_the_rest() -> None:
    """Report's repr names up to 12 finding codes, comma-separated, then '… N more'."""
    report = check(Topology(8), Cluster(8))
    many = [Finding("info", f"code{i}", "m") for i in range(14)]
    few = attrs.evolve(report, findings=tuple(many[:12]))
    text = repr(few)
    assert f"findings=[{', '.join(f'code{i}' for i in range(12))}]" in text
    text = repr(attrs.evolve(report, findings=tuple(many)))
    assert f"findings=[{', '.join(f'code{i}' for i in range(12))}, … 2 more]" in text
    text = repr(attrs.evolve(report, findings=tuple(many[:13])))
    assert f"findings=[{', '.join(f'code{i}' for i in range(12))}, … 1 more]" in text
    text = repr(attrs.evolve(report, findings=(Finding("info", "c" * 50, "m"),)))
    assert f"findings=[{'c' * 40}]" in text


def test_check_names_arguments_of_the_wrong_type() -> None:
    """check() says which argument is not a Topology, Cluster or positive int."""
    with pytest.raises(TopologyError, match=r"^topology must be a Topology, got str$"):
        check("x", Cluster(8))  # type: ignore[arg-type]
    with pytest.raises(
        TopologyError,
        match=r"^cluster must be a Cluster or a RankMap, got int; use e\.g\. "
        r"Cluster\(gpus_per_node=8\) or Allocation\.rank_map\(world_size\)$",
    ):
        check(Topology(8), 8)  # type: ignore[arg-type]
    with pytest.raises(
        TopologyError, match=r"^max_communicators must be a positive int, got 0 \(int\)$"
    ):
        check(Topology(8), Cluster(8), max_communicators=0)
    assert check(Topology(8), Cluster(8), max_communicators=1).ok


# -- messages and names ---------------------------------------------------------------------------


def test_canonical_kind_keeps_token_lists_that_name_no_kind() -> None:
    """Axis tokens whose set names no dense or expert kind come back exactly as given."""
    kinds = {frozenset(k.split("-")) for k in (*DENSE_KINDS, *EXPERT_KINDS)}
    for size in (2, 3):
        for tokens in itertools.permutations(("tp", "cp", "ep", "etp", "dp", "edp", "pp"), size):
            if frozenset(tokens) not in kinds:
                assert canonical_kind("-".join(tokens)) == "-".join(tokens)
            else:
                assert canonical_kind("-".join(tokens)) in (*DENSE_KINDS, *EXPERT_KINDS)


def test_empty_grid_and_bad_level_sizes_are_named() -> None:
    """from_sizes() without axes and a bad hierarchical level size name what is wrong."""
    with pytest.raises(TopologyError, match=r"^from_sizes needs at least one axis, e\.g\. "):
        Grid.from_sizes()
    with pytest.raises(TopologyError, match=r"^sizes\[1\] must be "):
        hierarchical_groups(range(4), [4, 0])


@pytest.mark.parametrize(
    ("severity", "example", "message"),
    [
        ("fatal", (), r"^severity must be one of .*, got 'fatal'$"),
        ("error", "abc", r"^Finding\.example must be a sequence of ranks, got 'abc'$"),
        ("error", 5, r"^Finding\.example must be a sequence of ranks, got 5$"),
        ("error", [1, 2.0], r"^Finding\.example must hold int ranks, got \[1, 2\.0\]$"),
    ],
)
def test_finding_rejects_bad_severities_and_examples(
    severity: str, example: object, message: str
) -> None:
    """Finding names a bad severity or example and shows the value."""
    with pytest.raises(TopologyError, match=message):
        Finding(severity, "code", "m", example)  # type: ignore[arg-type]


# -- Grid's rank queries and text forms ------------------------------------------------------------


def test_grid_rank_names_unknown_missing_and_out_of_range_axes() -> None:
    """rank() names an unknown axis, a missing one and a coordinate out of range."""
    grid = Grid.from_sizes(pp=2, tp=4)
    with pytest.raises(
        TopologyError, match=r"^unknown axis 'dp'; this grid has axes \('pp', 'tp'\)$"
    ):
        grid.rank(pp=0, tp=0, dp=0)
    with pytest.raises(TopologyError, match=r"^rank\(\) needs a coordinate for axis 'tp'$"):
        grid.rank(pp=0)
    with pytest.raises(TopologyError, match=r"^coordinate tp=4 is out of range; valid: 0 to 3$"):
        grid.rank(pp=0, tp=4)
    with pytest.raises(TopologyError, match=r"^rank must be an int, got '3' \(str\)$"):
        grid.coord("3")  # type: ignore[arg-type]


@settings(max_examples=BUDGET)
@given(grids())
def test_grid_repr_rebuilds_the_grid_and_str_names_every_axis(grid: Grid) -> None:
    """eval(repr(grid)) is the same grid; str lists name+size, outermost last, fastest named."""
    assert eval(repr(grid), {"Grid": Grid}) == grid
    text = str(grid)
    parts = text.split(" (")[0].split("·")
    assert parts == [f"{n}{s}" for n, s in reversed(list(zip(grid.axes, grid.shape, strict=True)))]
    assert f"({grid.axes[-1]} fastest)" in text
    assert ("from rank" in text) == (grid.rank_offset != 0)


# -- factoring beyond trial division ---------------------------------------------------------------


def sieve(limit: int) -> list[int]:
    """Every prime below ``limit`` (Eratosthenes)."""
    composite = [False] * limit
    primes = []
    for n in range(2, limit):
        if not composite[n]:
            primes.append(n)
            for multiple in range(n * n, limit, n):
                composite[multiple] = True
    return primes


LARGE_PRIMES = [p for p in sieve(5000) if p > 1000]


@settings(max_examples=BUDGET)
@given(
    st.lists(st.sampled_from(LARGE_PRIMES), min_size=1, max_size=4),
    st.sampled_from((1, 2, 12, 30, 997)),
)
def test_prime_factors_of_products_of_primes_above_1000(primes: list[int], small: int) -> None:
    """Factoring small * (primes > 1000) gives back each prime it was built from."""
    n = small
    for p in primes:
        n *= p
    expected = Counter(primes)
    for p in sieve(1000):
        while small % p == 0:
            expected[p] += 1
            small //= p
    assert prime_factors(n) == dict(sorted(expected.items()))
