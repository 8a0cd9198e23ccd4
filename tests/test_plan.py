"""plan(): completeness of the search, ranking, practitioners' choices, speed."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology import Cluster, Topology, TopologyError, check
from topology._args import divisors, prime_factors
from topology.cost import DEFAULT_ORDERS, MODELS, TOY_GPU, Hardware, Model, Workload, plan


def test_every_valid_layout_is_considered() -> None:
    """For W=64 the costed plus invalid layouts are all (tp<=8, pp | layers, cp) x orders x vpp."""
    model, world = MODELS["llama-7b"], 64
    expected = 0
    for tp in (1, 2, 4, 8):
        for pp in (1, 2, 4, 8, 16, 32, 64):
            if world % (tp * pp) or model.layers % pp:
                continue
            for cp in range(1, world // (tp * pp) + 1):
                if (world // (tp * pp)) % cp:
                    continue
                vpps = 2 if pp >= 3 and model.layers % (2 * pp) == 0 else 1
                expected += len(DEFAULT_ORDERS) * vpps
    result = plan(world, Cluster(8), model)
    assert result.considered + dict(result.rejected).get("invalid", 0) == expected


def test_ranked_fastest_first_and_all_fit() -> None:
    """The ranked layouts are sorted by total and every one fits and passes check."""
    result = plan(128, Cluster(8), MODELS["llama-13b"], top=8)
    totals = [e.total for e in result.ranked]
    assert totals == sorted(totals) and len(totals) == 8
    assert all(e.fits for e in result.ranked)
    assert all(check(e.topology, Cluster(8)).ok for e in result.ranked)


def test_70b_on_64_nodes_keeps_tp_inside_the_node() -> None:
    """Llama-70B on 64 x 8 H100s: the weights need model parallelism, and TP runs four
    activation all-reduces per layer per micro-batch, so it belongs on 450 GB/s NVLink, never on
    50 GB/s InfiniBand; even allowed tp up to 64 and a dp-innermost order, the winner shards with
    tp > 1 whose groups stay inside a node, and pipelines across nodes (pp > 1)."""
    result = plan(512, Cluster(8), MODELS["llama-70b"], max_tp=64)
    best = result.best
    assert best.topology.tp > 1 and best.link("tp") == "intra"
    assert best.topology.pp > 1
    assert all(e.link("tp") != "inter" for e in result.ranked)


def test_7b_on_one_node_stays_inside_it() -> None:
    """Llama-7B on one 8-GPU node: every group is inside the node, so nothing crosses."""
    best = plan(8, Cluster(8), MODELS["llama-7b"]).best
    assert all(link != "inter" for _, link in best.links)


def test_moe_keeps_expert_parallelism_inside_the_node() -> None:
    """Mixtral on 32 x 8 H100s: the token all-to-all is latency and bandwidth heavy, so the
    winner uses ep > 1 (experts do not fit replicated cheaply) with its groups on NVLink."""
    best = plan(256, Cluster(8), MODELS["mixtral-8x7b"]).best
    assert best.topology.ep > 1 and best.link("ep") == "intra"


def test_slower_network_never_gives_a_faster_plan() -> None:
    """With 1/100 of the inter-node bandwidth every layout costs at least as much, so the winner
    does too, and it still keeps tp on NVLink."""
    from topology.cost import H100_NODE, Hardware, Link

    slow = Hardware(
        "slow",
        compute_rate=H100_NODE.compute_rate,
        efficiency=H100_NODE.efficiency,
        intra=H100_NODE.intra,
        inter=Link(H100_NODE.inter.latency, H100_NODE.inter.bandwidth / 100),
        memory=H100_NODE.memory,
    )
    fast_best = plan(256, Cluster(8), MODELS["llama-13b"]).best
    slow_best = plan(256, Cluster(8), MODELS["llama-13b"], slow).best
    assert slow_best.total >= fast_best.total
    assert slow_best.link("tp") != "inter"


def test_explanation_names_the_winner() -> None:
    """explain() starts with the winner and compares it with the runners-up."""
    result = plan(64, Cluster(8), MODELS["llama-13b"])
    text = result.explain()
    assert text.startswith(f"winner {result.best.topology}") and "beats #2" in text


def test_nothing_fits_is_an_error() -> None:
    """A 70B model on 2 GPUs has no layout; .best says so."""
    result = plan(2, Cluster(8), MODELS["llama-70b"])
    assert result.ranked == ()
    with pytest.raises(TopologyError, match="no layout of 2 ranks fits llama-70b"):
        _ = result.best


def test_world_size_must_match_the_cluster() -> None:
    """A cluster of 4 x 8 GPUs is not 64 ranks."""
    with pytest.raises(TopologyError, match=r"4 nodes \* 8 GPUs = 32"):
        plan(64, Cluster(8, nodes=4), MODELS["llama-7b"])


def test_plan_4096_considers_hundreds_of_layouts() -> None:
    """W=4096 on 8-GPU nodes: a 70B and an MoE model each cost hundreds of layouts and rank some
    (its speed is benchmarks/bench_plan.py's business, not a test's)."""
    for name in ("llama-70b", "mixtral-8x7b"):
        result = plan(4096, Cluster(8), MODELS[name])
        assert result.considered > 400 and result.ranked


def test_dense_model_never_gets_ep() -> None:
    """A dense model is planned with ep = 1 only."""
    model = Model("d", 1e9, layers=8, hidden=1024, sequence_length=1024, global_batch=64)
    assert all(e.topology.ep == 1 for e in plan(16, Cluster(8), model, top=10).ranked)


def test_to_dict_is_json_ready() -> None:
    """to_dict has the ranked layouts, each rebuildable as a Topology."""
    data = plan(32, Cluster(8), MODELS["llama-7b"], top=2).to_dict()
    assert len(data["ranked"]) == 2
    assert Topology.from_dict(data["ranked"][0]["topology"]).world_size == 32


# -- cost grows with the factorisations, not with W -------------------------------------------


@given(st.integers(1, 20_000))
def test_divisors_are_every_divisor(n: int) -> None:
    """divisors(n) is exactly the d in 1..n with n % d == 0, ascending."""
    assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


@given(st.integers(1, 2**64))
def test_prime_factors_multiply_back(n: int) -> None:
    """prime_factors(n) are primes (checked by trial division when small) whose product is n."""
    product = 1
    for prime, exponent in prime_factors(n).items():
        product *= prime**exponent
        if prime < 10**6:
            assert all(prime % d for d in range(2, math.isqrt(prime) + 1))
    assert product == n


@pytest.mark.parametrize(
    ("n", "count"),
    [
        (2**40, 41),
        (2**40 - 87, 2),  # a prime just below 2**40
        ((2**31 - 1) * (2**31 - 19), 4),  # two primes near 2**31
        (2**20 * 3**10 * 5**5, 21 * 11 * 6),
    ],
)
def test_divisors_of_large_numbers(n: int, count: int) -> None:
    """Large worlds and semiprimes: the right number of divisors, each one dividing n."""
    found = divisors(n)
    assert len(found) == count and all(n % d == 0 for d in found) and found == sorted(found)


def test_plan_at_2_to_the_40_counts_every_factorisation() -> None:
    """At W = 2**40 plan enumerates every (tp <= 8, pp | layers, cp) x orders x vpp layout; a
    device too small for any of them keeps the check screening out of it."""
    world = 2**40
    tiny = Hardware("tiny", 1e15, TOY_GPU.intra, TOY_GPU.inter, memory=1.0)
    work = Workload(
        "w", samples=2**41, micro_batch=1, compute=1.0, gradient=1.0, layers=48, weight_bytes=1e12
    )
    expected = 0
    for a in range(4):  # tp = 2**a <= 8
        for b in range(41 - a):  # pp = 2**b must divide 48 = 2**4 * 3
            if b > 4:
                continue
            for _c in range(41 - a - b):  # cp = 2**c, dp = the rest
                vpps = 2 if 2**b >= 3 and 48 % (2 ** (b + 1)) == 0 else 1
                expected += len(DEFAULT_ORDERS) * vpps
    result = plan(world, Cluster(8), work, tiny)
    assert result.considered + dict(result.rejected).get("invalid", 0) == expected
    assert result.ranked == () and dict(result.rejected)["memory"] == result.considered


# -- invalid arguments ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_tp": 0}, "max_tp must be a positive int, got 0 (int)"),
        ({"max_tp": "8"}, "max_tp must be a positive int, got '8' (str)"),
        ({"top": 0}, "top must be a positive int, got 0 (int)"),
        ({"orders": []}, "orders must be a non-empty list of order strings"),
        ({"orders": "tp-dp"}, "orders must be a non-empty list of order strings"),
        ({"orders": [5]}, "orders[0] is not a valid order: order must be a string"),
        ({"orders": ["tp-xp"]}, "orders[0] is not a valid order: order 'tp-xp' has unknown axis"),
        ({"vpp": 5}, "vpp must be a non-empty list of virtual stage counts or None"),
        ({"vpp": [None, 0]}, "vpp[1] must be a positive int, got 0 (int)"),
        ({"vpp": ["a"]}, "vpp[0] must be a positive int, got 'a' (str)"),
        ({"distributed_optimizer": 1}, "distributed_optimizer must be True or False, got 1"),
    ],
)
def test_plan_checks_its_options(kwargs: dict[str, Any], message: str) -> None:
    """plan's keyword options are checked up front, naming the option (max_tp=0 included)."""
    with pytest.raises(TopologyError, match=re.escape(message)):
        plan(8, Cluster(8), MODELS["llama-7b"], **kwargs)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            (2**40 + 1, Cluster(8), MODELS["llama-7b"]),
            "world_size must be at most 1099511627776 (2**40)",
        ),
        ((8.0, Cluster(8), MODELS["llama-7b"]), "world_size must be a positive int, got 8.0"),
        ((8, None, MODELS["llama-7b"]), "cluster must be a Cluster, e.g. Cluster(8), got None"),
        ((8, Cluster(8), None), "model must be a Model or a Workload"),
        ((8, Cluster(8), MODELS["llama-7b"], "h100"), "hardware must be a Hardware"),
    ],
)
def test_plan_checks_its_arguments(args: tuple[Any, ...], message: str) -> None:
    """plan's positional arguments of the wrong type or range are named."""
    with pytest.raises(TopologyError, match=re.escape(message)):
        plan(*args)


def test_plan_explain_checks_top() -> None:
    """Plan.explain(top) needs a positive int."""
    with pytest.raises(TopologyError, match=re.escape("top must be a positive int")):
        plan(8, Cluster(8), MODELS["llama-7b"]).explain("3")  # type: ignore[arg-type]
