"""The cost model: alpha-beta laws, hand-computed collectives, seed 003's figures, memory."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology import Cluster, Topology, TopologyError
from topology._preflight.placement import crosses_domains
from topology.cost import (
    H100_NODE,
    SCENARIOS,
    TOY_GPU,
    TOY_WORKLOAD,
    Hardware,
    Link,
    Model,
    Workload,
    all_gather,
    all_reduce,
    all_to_all,
    estimate,
    load_hardware,
    load_model,
    p2p,
    reduce_scatter,
    scenario,
    sequential_ring,
)

SEED = json.loads((Path(__file__).parent / "data" / "seeds.json").read_text())["simulator"][0]

links = st.builds(
    Link,
    latency=st.floats(0, 1e-3, allow_nan=False),
    bandwidth=st.floats(1e6, 1e12, allow_nan=False),
)
group_sizes = st.integers(1, 64)
payloads = st.floats(0, 1e10, allow_nan=False)
ORDERS = ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "dp-tp-cp-ep-pp", "tp-pp-dp", "tp-cp-pp-dp")


@st.composite
def layouts(draw: st.DrawFn) -> Topology:
    """Small dense layouts in any of a few orders."""
    tp, cp, pp, dp = (draw(st.sampled_from([1, 2, 3, 4])) for _ in range(4))
    order = draw(st.sampled_from(ORDERS))
    try:
        return Topology(tp * cp * pp * dp, tp=tp, cp=cp, pp=pp, order=order)
    except TopologyError:
        return Topology(tp * cp * pp * dp, tp=tp, cp=cp, pp=pp)


def _toy_for(topology: Topology) -> Workload:
    """A toy workload whose batch splits over the layout's dp."""
    return Workload(
        "toy",
        samples=4 * (topology.dp or 1),
        micro_batch=1,
        compute=20.0,
        gradient=500.0,
        layers=12,
        activation=10.0,
        weight_bytes=1e3,
        activation_bytes=5.0,
    )


def _faster(hardware: Hardware, factor: float) -> Hardware:
    """``hardware`` with both links ``factor`` times the bandwidth."""
    return Hardware(
        hardware.name,
        compute_rate=hardware.compute_rate,
        intra=Link(hardware.intra.latency, hardware.intra.bandwidth * factor),
        inter=Link(hardware.inter.latency, hardware.inter.bandwidth * factor),
    )


# -- laws -------------------------------------------------------------------------------------


@given(links, group_sizes, payloads, st.floats(1, 100))
def test_more_bandwidth_never_costs_more_collectives(
    link: Link, n: int, size: float, factor: float
) -> None:
    """Every collective is non-increasing in bandwidth."""
    fast = Link(link.latency, link.bandwidth * factor)
    for collective in (all_reduce, all_gather, reduce_scatter, all_to_all):
        assert collective(fast, n, size) <= collective(link, n, size)
    assert p2p(fast, size) <= p2p(link, size)


@given(layouts(), st.sampled_from([1, 2, 4, 8]), st.floats(1, 100))
def test_more_bandwidth_never_costs_more_step(topology: Topology, gpus: int, factor: float) -> None:
    """A step never gets slower when every link gets faster."""
    cluster, work = Cluster(gpus), _toy_for(topology)
    hardware = Hardware("h", compute_rate=10.0, intra=Link(0.01, 200.0), inter=Link(0.05, 50.0))
    slow = estimate(topology, cluster, work, hardware)
    fast = estimate(topology, cluster, work, _faster(hardware, factor))
    assert fast.total <= slow.total * (1 + 1e-12)


@given(layouts(), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]))
def test_bigger_nodes_never_cost_more(topology: Topology, gpus: int, growth: int) -> None:
    """Nodes of k*G GPUs contain the nodes of G, so no group gets a slower link."""
    work = _toy_for(topology)
    hardware = Hardware("h", compute_rate=10.0, intra=Link(0.01, 200.0), inter=Link(0.05, 50.0))
    small = estimate(topology, Cluster(gpus), work, hardware)
    big = estimate(topology, Cluster(gpus * growth), work, hardware)
    assert big.total <= small.total * (1 + 1e-12)


@given(st.sampled_from([2, 4, 8]), st.sampled_from([2, 4, 8]), st.sampled_from([1, 2]))
def test_tp_across_nodes_never_beats_tp_inside_a_node(tp: int, dp: int, pp: int) -> None:
    """Same sizes, tp innermost vs dp innermost on tp-GPU nodes: the crossing tp costs more."""
    world, cluster = tp * dp * pp, Cluster(tp)
    work = _toy_for(Topology(world, tp=tp, pp=pp))
    hardware = Hardware("h", compute_rate=10.0, intra=Link(0.01, 200.0), inter=Link(0.05, 50.0))
    inside = estimate(Topology(world, tp=tp, pp=pp), cluster, work, hardware)
    across = estimate(
        Topology(world, tp=tp, pp=pp, order="dp-tp-cp-ep-pp"), cluster, work, hardware
    )
    assert (inside.link("tp"), across.link("tp")) == ("intra", "inter")
    assert across.comm("tp") > inside.comm("tp")
    assert across.compute == inside.compute


@given(layouts())
def test_compute_is_conserved(topology: Topology) -> None:
    """Summed over all GPUs, compute equals one GPU doing the whole batch."""
    work = _toy_for(topology)
    one = estimate(Topology(1), Cluster(1), work, TOY_GPU).compute
    assert estimate(topology, Cluster(4), work, TOY_GPU).compute * topology.world_size == (
        pytest.approx(one)
    )


@given(layouts(), st.sampled_from([1, 2, 3, 4, 8]), st.sampled_from(["tp", "cp", "dp-cp", "pp"]))
def test_crossing_agrees_with_enumerating_groups(topology: Topology, gpus: int, kind: str) -> None:
    """crosses_domains() from strides equals listing every group and its nodes."""
    cluster = Cluster(gpus)
    brute = any(len({cluster.node_of(r) for r in g}) > 1 for g in topology.groups(kind))
    assert crosses_domains(topology, cluster, kind) == brute


@given(st.sampled_from([2, 3, 4]), st.sampled_from([1, 2]), st.sampled_from([1, 2, 4]))
def test_virtual_stages_divide_the_bubble(pp: int, tp: int, vpp: int) -> None:
    """Interleaving vpp chunks per stage divides the bubble by vpp, all else equal."""
    work = Workload("w", samples=16, micro_batch=1, compute=24.0, gradient=8.0, layers=48)
    plain = estimate(Topology(pp * tp * 2, tp=tp, pp=pp), Cluster(4), work, TOY_GPU)
    chunked = estimate(Topology(pp * tp * 2, tp=tp, pp=pp, vpp=vpp), Cluster(4), work, TOY_GPU)
    assert chunked.bubble == pytest.approx(plain.bubble / vpp)
    assert chunked.compute == plain.compute


def _hand_step(
    topology: Topology, cluster: Cluster, work: Workload, links: dict[bool, Link]
) -> dict[str, float]:
    """An independent, brute-force formulation: list every group, price it on its own link,
    and let the slowest group of each kind set the pace."""
    m = work.samples // ((topology.dp or 1) * work.micro_batch)
    act = work.micro_batch * work.activation
    tp, cp, pp = topology.tp, topology.cp, topology.pp
    per_stage = work.layers // pp

    def slowest(kind: str, price: Callable[[Link, int], float]) -> float:
        worst = 0.0
        for group in topology.groups(kind):
            if len(group) > 1:
                leaves = len({cluster.node_of(r) for r in group}) > 1
                worst = max(worst, price(links[leaves], len(group)))
        return worst

    def ring(hop: Link, n: int, size: float) -> float:
        return 2 * (n - 1) * (hop.latency + size / n / hop.bandwidth)

    def kv_ring(hop: Link, n: int) -> float:
        return (n - 1) * (hop.latency + 2 * act / (cp * tp) / hop.bandwidth)

    def send(hop: Link, n: int) -> float:
        return hop.latency + act / (cp * tp) / hop.bandwidth

    return {
        "tp": m * per_stage * 4 * slowest("tp", lambda hop, n: ring(hop, n, act / cp)),
        "cp": m * per_stage * 3 * slowest("cp", kv_ring),
        "pp": 2 * (m + pp - 1) * slowest("pp", send),
        "dp": slowest("dp-cp", lambda hop, n: ring(hop, n, work.gradient / (tp * pp))),
    }


@given(layouts(), st.sampled_from([1, 2, 4, 8]))
def test_estimate_agrees_with_pricing_every_group(topology: Topology, gpus: int) -> None:
    """Each communication line equals the brute-force price of the slowest group of its kind."""
    cluster, work = Cluster(gpus), _toy_for(topology)
    link = {False: Link(0.01, 200.0), True: Link(0.05, 50.0)}
    hardware = Hardware("h", compute_rate=10.0, intra=link[False], inter=link[True])
    result = estimate(topology, cluster, work, hardware)
    for name, seconds in _hand_step(topology, cluster, work, link).items():
        assert result.comm(name) == pytest.approx(seconds), name


# -- hand-computed collectives ----------------------------------------------------------------

HAND = Link(latency=1.0, bandwidth=0.5)  # alpha 1 s, beta 2 s per unit


def test_all_reduce_by_hand() -> None:
    """Ring all-reduce of 8 units over 4 ranks: 2*3*(1 + 2*8/4) = 30."""
    assert all_reduce(HAND, 4, 8.0) == pytest.approx(30.0)


def test_all_gather_and_reduce_scatter_by_hand() -> None:
    """All-gather / reduce-scatter of 8 units over 4 ranks: 3*(1 + 2*2) = 15."""
    assert all_gather(HAND, 4, 8.0) == pytest.approx(15.0)
    assert reduce_scatter(HAND, 4, 8.0) == pytest.approx(15.0)


def test_all_to_all_and_p2p_by_hand() -> None:
    """All-to-all of 8 units over 2 ranks: 1*(1 + 2*4) = 9; a send of 8 units: 1 + 16 = 17."""
    assert all_to_all(HAND, 2, 8.0) == pytest.approx(9.0)
    assert p2p(HAND, 8.0) == pytest.approx(17.0)


def test_single_rank_groups_cost_nothing() -> None:
    """A collective over one rank is free."""
    assert all_reduce(HAND, 1, 8.0) == all_gather(HAND, 1, 8.0) == all_to_all(HAND, 1, 8.0) == 0


# -- seed 003 ---------------------------------------------------------------------------------


def test_toy_gpu_is_the_seeds() -> None:
    """The toy GPU's constants are the seed's."""
    assert 1 / TOY_GPU.compute_rate == SEED["seconds_per_compute_unit"]
    assert TOY_GPU.intra.latency == SEED["network_base_latency_seconds"]
    assert TOY_GPU.intra.seconds_per_unit == SEED["seconds_per_data_unit"]
    assert TOY_WORKLOAD.samples == SEED["items"]
    assert TOY_WORKLOAD.compute == SEED["compute_units_per_item"]
    assert TOY_WORKLOAD.gradient == SEED["gradient_size"]


def test_seed_0d_figure() -> None:
    """0D: one GPU computes 16 items of 20 units: 32.0 s."""
    result = scenario("0d").estimate
    assert result.total == pytest.approx(SEED["expected_seconds"]["0d_total"], abs=1e-9)


def test_seed_1d_figures() -> None:
    """1D: 8.0 s compute, the seed's sequential ring 20.4 s, 28.4 s in all."""
    expected, result = SEED["expected_seconds"], scenario("1d")
    assert result.estimate.compute == pytest.approx(expected["1d_compute"], abs=1e-9)
    assert result.seed_sync == pytest.approx(expected["1d_sync_sequential"], abs=1e-9)
    assert result.seed_total == pytest.approx(expected["1d_total"], abs=1e-9)


def test_seed_1d_textbook_ring() -> None:
    """1D's textbook ring is 2(W-1)(latency + per_unit*G/W) = 7.8 s."""
    w, g = SEED["workers"], SEED["gradient_size"]
    textbook = (
        2 * (w - 1) * (SEED["network_base_latency_seconds"] + SEED["seconds_per_data_unit"] * g / w)
    )
    assert textbook == pytest.approx(7.8)
    assert scenario("1d").estimate.comm("dp") == pytest.approx(textbook)


def test_sequential_ring_formula() -> None:
    """The seed's ring is W * (latency + per_unit*G + receive)."""
    assert sequential_ring(HAND, 3, 2.0, receive=0.5) == pytest.approx(3 * (1 + 4 + 0.5))


def test_seed_2d_by_hand() -> None:
    """2D (dp4 tp2): compute 16*20*0.1/8 = 4; tp 4 items * 2 layers * 4 * 2*(0.05+0.01*5) = 6.4;
    dp 2*3*(0.05 + 0.01*250/4) = 4.05."""
    result = scenario("2d").estimate
    assert (result.compute, result.comm("tp"), result.comm("dp")) == pytest.approx((4, 6.4, 4.05))
    assert result.total == pytest.approx(14.45)


def test_seed_3d_by_hand() -> None:
    """3D (dp4 tp2 pp2): compute 2; tp 3.2; pp 2*(4+1)*(0.05+0.01*5) = 1; dp 6*(0.05+1.25/4)
    = 2.175; bubble 1*(0.5 + 0.8) = 1.3."""
    r = scenario("3d").estimate
    got = (r.compute, r.comm("tp"), r.comm("pp"), r.comm("dp"), r.bubble)
    assert got == pytest.approx((2.0, 3.2, 1.0, 2.175, 1.3))


def test_seed_4d_by_hand() -> None:
    """4D (+cp2): cp per micro-batch 1 layer * 3 * 1 * (0.05 + 0.01*2*10/4) = 0.3, so 1.2;
    dp over dp*cp = 8 ranks: 14*(0.05 + 0.01*125/8) = 2.8875."""
    r = scenario("4d").estimate
    assert (r.comm("cp"), r.comm("dp")) == pytest.approx((1.2, 2.8875))
    assert r.link("cp") == "intra" and r.link("ep") == "none"


def test_pipeline_sends_by_hand() -> None:
    """pp4 dp2 on the toy, 8 micro-batches of 10 units: a send is 0.05 + 0.1 s, 2*(8 + 3) sends
    = 3.3 s, 2*(2*8 + 3) = 5.7 s with vpp2; bubble 3 * 0.5 = 1.5 s, 0.75 s with vpp2."""
    work = Workload(
        "w", samples=16, micro_batch=1, compute=20.0, gradient=0.0, layers=8, activation=10.0
    )
    plain = estimate(Topology(8, pp=4), Cluster(8), work, TOY_GPU)
    chunked = estimate(Topology(8, pp=4, vpp=2), Cluster(8), work, TOY_GPU)
    assert (plain.comm("pp"), chunked.comm("pp")) == pytest.approx((3.3, 5.7))
    assert (plain.bubble, chunked.bubble) == pytest.approx((1.5, 0.75))


def test_every_scenario_prints_its_lines() -> None:
    """Each scenario's text names compute and its total."""
    for name in SCENARIOS:
        text = str(scenario(name))
        assert "compute" in text and "per step" in text


# -- memory and errors ------------------------------------------------------------------------


def test_memory_by_hand() -> None:
    """tp2 pp2 dp2, 100 B of weights: 25 + 25 grads + 25/2*6 optimizer + 5*2 layers*2 in flight."""
    work = Workload(
        "w",
        samples=8,
        micro_batch=1,
        compute=1.0,
        gradient=1.0,
        layers=4,
        weight_bytes=100.0,
        activation_bytes=10.0,
    )
    mem = estimate(Topology(8, tp=2, pp=2), Cluster(8), work, TOY_GPU).memory
    assert mem is not None
    assert (mem.weights, mem.gradients, mem.optimizer, mem.activations) == pytest.approx(
        (25, 25, 75, 20)
    )


def test_70b_does_not_fit_one_gpu() -> None:
    """69e9 parameters need ~1.1 TB of weights, gradients and Adam state: not an 80 GB GPU."""
    model = Model("big", 69e9, layers=80, hidden=8192, sequence_length=4096, global_batch=8)
    result = estimate(Topology(1), Cluster(8), model, H100_NODE)
    assert not result.fits and "DOES NOT FIT" in str(result)


def test_batch_must_split_into_micro_batches() -> None:
    """16 samples cannot split over dp 3."""
    with pytest.raises(TopologyError, match=r"samples \(16\) must be a multiple of dp\(3\)"):
        estimate(Topology(3), Cluster(4), TOY_WORKLOAD, TOY_GPU)


def test_unknown_scenario_is_named() -> None:
    """An unknown scenario lists the valid ones."""
    with pytest.raises(TopologyError, match="unknown scenario '5d'; valid scenarios: 0d"):
        scenario("5d")


def test_model_rejects_more_experts_than_parameters() -> None:
    """expert_parameters larger than parameters is refused."""
    with pytest.raises(TopologyError, match=r"expert_parameters \(2\) cannot exceed parameters"):
        Model("m", 1, layers=1, hidden=1, sequence_length=1, global_batch=1, expert_parameters=2)


def test_link_rejects_zero_bandwidth() -> None:
    """A link needs a positive bandwidth."""
    with pytest.raises(TopologyError, match="bandwidth must be a finite number > 0, got 0"):
        Link(latency=0.0, bandwidth=0)


# -- invalid inputs: one exception family, messages that name the field ------------------------

SMALL = Model("small", 1e6, layers=4, hidden=64, sequence_length=128, global_batch=16)


def _model(**changes: Any) -> Model:
    fields = {**SMALL.to_dict(), **changes}
    return Model(**fields)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"parameters": math.inf}, "parameters must be a finite number >= 0, got inf"),
        ({"parameters": math.nan}, "parameters must be a finite number >= 0, got nan"),
        ({"parameters": -1}, "parameters must be a finite number >= 0, got -1"),
        ({"parameters": "1e9"}, "parameters must be a finite number >= 0, got '1e9'"),
        ({"expert_parameters": -0.5}, "expert_parameters must be a finite number >= 0, got -0.5"),
        ({"layers": 0}, "layers must be a positive int, got 0 (int)"),
        (
            {"hidden": 2**60},
            "hidden must be at most 9007199254740992 (2**53), the most a float counts exactly, "
            "got 1152921504606846976",
        ),
        ({"global_batch": 2.0}, "global_batch must be a positive int, got 2.0 (float)"),
        ({"name": None}, "name must be a non-empty string, got None"),
        ({"micro_batch": 3}, "global_batch (16) must be a multiple of micro_batch (3)"),
        (
            {"parameters": 1e308, "sequence_length": 2**40},
            "model 'small' is too large to cost (compute must be a finite number >= 0, got inf)",
        ),
    ],
)
def test_model_rejects_bad_numbers(changes: dict[str, Any], message: str) -> None:
    """Non-finite, negative, ill-typed and inconsistent model numbers name the field."""
    with pytest.raises(TopologyError, match=re.escape(message)):
        _model(**changes)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"compute": math.inf}, "compute must be a finite number >= 0, got inf"),
        ({"gradient": -1.0}, "gradient must be a finite number >= 0, got -1.0"),
        (
            {"optimizer_bytes_per_weight_byte": math.nan},
            "optimizer_bytes_per_weight_byte must be a finite number >= 0, got nan",
        ),
        ({"weight_bytes": -1}, "weight_bytes must be a finite number >= 0, got -1"),
        ({"samples": 10, "micro_batch": 4}, "samples (10) must be a multiple of micro_batch (4)"),
        ({"tp_collectives": -1}, "tp_collectives must be a non-negative int, got -1 (int)"),
    ],
)
def test_workload_rejects_bad_numbers(changes: dict[str, Any], message: str) -> None:
    """Workload fields are finite, non-negative and consistent."""
    fields = {"samples": 16, "micro_batch": 1, "compute": 1.0, "gradient": 1.0, **changes}
    with pytest.raises(TopologyError, match=re.escape(message)):
        Workload("w", **fields)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Link(math.inf, 1.0), "latency must be a finite number >= 0, got inf"),
        (lambda: Link(0.0, math.nan), "bandwidth must be a finite number > 0, got nan"),
        (
            lambda: Hardware("h", 1.0, intra=None, inter=TOY_GPU.inter),  # type: ignore[arg-type]
            "intra must be a Link, e.g. Link(5e-6, 450e9), got None (NoneType)",
        ),
        (
            lambda: Hardware("h", 1.0, TOY_GPU.intra, TOY_GPU.inter, memory=-1),
            "memory must be a finite number > 0, got -1",
        ),
        (
            lambda: Hardware("h", 5e-324, TOY_GPU.intra, TOY_GPU.inter, efficiency=0.5),
            "compute_rate (5e-324) * efficiency (0.5) is 0 in floating point",
        ),
    ],
)
def test_hardware_rejects_bad_numbers(build: Callable[[], object], message: str) -> None:
    """Links and hardware take finite positive rates and real Link values."""
    with pytest.raises(TopologyError, match=re.escape(message)):
        build()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: all_reduce(None, 2, 1.0), "link must be a Link, e.g. TOY_GPU.intra, got None"),  # type: ignore[arg-type]
        (lambda: all_gather(TOY_GPU.intra, "2", 1.0), "n must be a positive int, got '2' (str)"),  # type: ignore[arg-type]
        (lambda: p2p(TOY_GPU.intra, math.inf), "size must be a finite number >= 0, got inf"),
        (lambda: TOY_GPU.intra.time(-1.0), "size must be a finite number >= 0, got -1.0"),
        (lambda: TOY_GPU.link(1), "crosses_nodes must be True or False, got 1"),  # type: ignore[arg-type]
        (lambda: TOY_WORKLOAD.micro_batches(0), "dp must be a positive int, got 0 (int)"),
    ],
)
def test_cost_functions_check_their_arguments(call: Callable[[], object], message: str) -> None:
    """The public collectives and value methods refuse ill-typed arguments by name."""
    with pytest.raises(TopologyError, match=re.escape(message)):
        call()


@pytest.mark.parametrize(
    ("position", "value", "message"),
    [
        (0, None, "topology must be a Topology, e.g. Topology(8, tp=2), got None (NoneType)"),
        (1, 8, "cluster must be a Cluster, e.g. Cluster(gpus_per_node=8), got 8 (int)"),
        (2, "llama-7b", "model must be a Model or a Workload, e.g. MODELS['llama-7b']"),
        (3, "h100", "hardware must be a Hardware, e.g. H100_NODE, got 'h100' (str)"),
    ],
)
def test_estimate_checks_argument_types(position: int, value: object, message: str) -> None:
    """estimate() names the argument that has the wrong type."""
    args: list[Any] = [Topology(8, tp=2), Cluster(8), SMALL, H100_NODE]
    args[position] = value
    with pytest.raises(TopologyError, match=re.escape(message)):
        estimate(*args)


def test_estimate_checks_the_optimizer_flag() -> None:
    """distributed_optimizer is a bool."""
    with pytest.raises(TopologyError, match="distributed_optimizer must be True or False"):
        estimate(Topology(8), Cluster(8), SMALL, H100_NODE, distributed_optimizer="yes")  # type: ignore[arg-type]


def test_estimate_needs_layers_that_split_over_the_pipeline() -> None:
    """3 layers cannot split over pp 2, nor 8 layers over pp 2 * vpp 3."""
    with pytest.raises(TopologyError, match=re.escape("layers (3) must be a multiple of pp(2)")):
        estimate(Topology(4, pp=2), Cluster(4), _model(layers=3), H100_NODE)
    with pytest.raises(TopologyError, match=re.escape("pp(4) * vpp(3) = 12")):
        estimate(Topology(4, pp=4, vpp=3), Cluster(4), _model(layers=8), H100_NODE)


def test_estimate_refuses_to_overflow() -> None:
    """Figures that overflow floating point are an error, never an inf or nan estimate."""
    work = Workload("w", samples=2**50, micro_batch=2**49, compute=1e308, gradient=1.0)
    with pytest.raises(TopologyError, match=r"cannot be costed: .* too large for floating point"):
        estimate(Topology(2), Cluster(2), work, TOY_GPU)


@given(
    st.floats(0, 1e308),
    st.floats(0, 1e308),
    st.floats(0, 1e308),
    st.integers(1, 2**52),
    st.sampled_from([1, 2, 4]),
)
def test_estimates_are_finite_or_refused(
    compute: float, gradient: float, activation: float, micro: int, pp: int
) -> None:
    """Any valid workload gives finite figures or a TopologyError, never inf or nan."""
    work = Workload(
        "w",
        samples=micro * 2,
        micro_batch=micro,
        compute=compute,
        gradient=gradient,
        activation=activation,
        layers=4,
        weight_bytes=gradient,
        activation_bytes=activation,
    )
    try:
        result = estimate(Topology(2 * pp, pp=pp), Cluster(2), work, H100_NODE)
    except TopologyError:
        return
    assert math.isfinite(result.total)
    assert result.memory is not None and math.isfinite(result.memory.total)


# -- loading models and hardware ----------------------------------------------------------------


@pytest.mark.parametrize("spec", [None, 5, ["llama-7b"], b"llama-7b"])
def test_load_model_needs_a_string(spec: Any) -> None:
    """load_model with a non-string names what it needs."""
    with pytest.raises(TopologyError, match=r"model must be a preset name .* or the path of"):
        load_model(spec)


@pytest.mark.parametrize("name", [None, [], {}, 3.5])
def test_load_hardware_and_scenario_need_known_names(name: Any) -> None:
    """load_hardware and scenario with unhashable or non-string names raise TopologyError."""
    with pytest.raises(TopologyError, match="unknown hardware"):
        load_hardware(name)
    with pytest.raises(TopologyError, match="unknown scenario"):
        scenario(name)


MODEL_TEXT = (
    '{{"name": "m", "parameters": {p}, "layers": 2, "hidden": {h}, "sequence_length": 8, '
    '"global_batch": 4}}'
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            MODEL_TEXT.format(p="Infinity", h=8),
            "is not valid JSON (Infinity is not a number JSON allows",
        ),
        (MODEL_TEXT.format(p="NaN", h=8), "is not valid JSON (NaN is not a number JSON allows"),
        (MODEL_TEXT.format(p="1e999", h=8), "parameters must be a finite number >= 0, got inf"),
        (MODEL_TEXT.format(p=-1, h=8), "parameters must be a finite number >= 0, got -1"),
        (MODEL_TEXT.format(p=1, h="9" * 5000), "an integer of 5000 digits is out of range"),
        (MODEL_TEXT.format(p=1, h=2**60), "hidden must be at most 9007199254740992 (2**53)"),
        ("[" * 100_000 + "]" * 100_000, "nests too deeply; it must be one flat table"),
        ("[1]", "must hold an object of Model fields, got list"),
        ('{"name": "m"}', "model is missing field 'parameters'"),
    ],
)
def test_model_files_are_checked(tmp_path: Path, text: str, message: str) -> None:
    """A model file with non-finite, negative, huge or deeply nested values is refused."""
    path = tmp_path / "model.json"
    path.write_text(text)
    with pytest.raises(TopologyError, match=re.escape(message)):
        load_model(str(path))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_model_file_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO named as the model file is an error at once (opening it must not wait)."""
    path = tmp_path / "model.json"
    os.mkfifo(path)
    with pytest.raises(TopologyError, match="is a FIFO, not a regular file"):
        load_model(str(path))


def test_model_file_round_trips_through_a_path(tmp_path: Path) -> None:
    """A file written from Model.to_dict loads back equal, given as a str or a Path."""
    path = tmp_path / "model.json"
    path.write_text(json.dumps(SMALL.to_dict()))
    assert load_model(str(path)) == SMALL
    assert load_model(path) == SMALL


def test_estimate_refuses_gtp_it_does_not_model() -> None:
    """A layout with Megatron's GTP axes is refused, not priced as if gtp were dp."""
    message = (
        "estimate does not model Megatron's GTP axes yet (gtp 2, egtp 1: weight all-gathers, "
        "batches split over gtp); estimate the layout without them, e.g. "
        "attrs.evolve(topology, gtp=1, egtp=1)"
    )
    with pytest.raises(TopologyError, match=f"^{re.escape(message)}$"):
        estimate(Topology(16, tp=2, gtp=2, pp=2), Cluster(8), TOY_WORKLOAD, TOY_GPU)
