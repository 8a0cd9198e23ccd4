"""Every public callable of ``topology`` and ``topology.cost``, fed any Python value, raises only
``TopologyError``.

Arguments are drawn from every kind of Python value (ints from tiny to 5,000 digits, bools,
floats with nan and inf, strings, bytes, None, lists, tuples, sets, dicts, odd objects), with
valid values mixed in so the calls also reach the code behind the first check. A call may
return or raise ``TopologyError``; anything else escaping is a bug. World sizes that are valid
stay small wherever a call would build groups, so no example allocates much; the huge ints are
still drawn and must be refused (or handled) without allocating.
"""

from __future__ import annotations

import inspect
import json
import math
import tempfile
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topology import (
    Allocation,
    AxisGroups,
    Cluster,
    DerivedGroups,
    Finding,
    Grid,
    Host,
    OrthogonalGroups,
    Tier,
    Topology,
    TopologyError,
    check,
    hierarchical_groups,
    place,
)
from topology.cost import (
    HARDWARE,
    MODELS,
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
    plan,
    reduce_scatter,
    scenario,
    sequential_ring,
)
from topology.strategies import grids, ranks, topologies

FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

# -- every kind of Python value -------------------------------------------------------------------


class Opaque:
    """An object with no special behaviour."""


class BadRepr:
    """An object whose repr raises, as a broken user type might."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


ODD_OBJECTS: list[Callable[[], object]] = [object, Opaque, BadRepr, lambda: range(3)]
ODD_OBJECTS += [lambda: 1 + 2j, lambda: Fraction(1, 3), lambda: Decimal(2), lambda: len]
EXTREME_INTS = [0, -1, 1, 2, 3, 7, 2**31, 2**40, 2**40 + 1, 2**53 + 1, 2**63, -(2**63), 10**400]
# Past the 4,300 digits Python turns into a string: made by a map, because Hypothesis reprs the
# elements of sampled_from.
HUGE = st.sampled_from([4400, -4400]).map(lambda e: 10 ** abs(e) * (1 if e > 0 else -1))
WORDS = [
    "",
    "-",
    "tp",
    "dp",
    "pp",
    "cp",
    "ep",
    "etp",
    "edp",
    "tp-dp",
    "dp-cp",
    "mp",
    "embedding",
    "hcp-0",
    "hcp-9",
    "dense",
    "expert",
    "tp-cp-ep-dp-pp",
    "tp-tp",
    "llama-7b",
    "h100",
    "toy",
    "1d",
    "x.json",
    "/nonexistent/model.json",
    "é",
    "\x00",
]
SCALARS = st.one_of(
    st.integers(-(2**80), 2**80),
    st.integers(-3, 66),
    st.sampled_from(EXTREME_INTS),
    HUGE,
    st.booleans(),
    st.floats(),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -0.0, 5e-324, 0.5, 2.0]),
    st.text(max_size=8),
    st.sampled_from(WORDS),
    st.binary(max_size=4),
    st.none(),
    st.sampled_from(ODD_OBJECTS).map(lambda make: make()),
)
ANYTHING = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.frozensets(st.integers(-2, 9) | st.text(max_size=2), max_size=3),
        st.sets(st.integers(-2, 9), max_size=3),
        st.dictionaries(st.text(max_size=3) | st.integers(-2, 3), inner, max_size=3),
    ),
    max_leaves=6,
)


def mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``valid`` three times in four, any value otherwise."""
    return st.integers(0, 3).flatmap(lambda k: ANYTHING if k == 0 else valid)


def attempt(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The call's result, or None if it raised TopologyError; any other exception escapes."""
    try:
        return call(*args, **kwargs)
    except TopologyError:
        return None


def exercise(value: object) -> None:
    """Use a value the library returned or accepted: str, repr, every property, ``to_dict``."""
    if value is None:
        return
    attempt(str, value)
    attempt(repr, value)
    for name, member in inspect.getmembers(type(value)):
        if isinstance(member, property):
            attempt(getattr, value, name)
    if hasattr(value, "to_dict"):
        attempt(value.to_dict)


@st.composite
def evolved(draw: st.DrawFn, valid: Any) -> dict[str, Any]:
    """Replacement values for up to three of ``valid``'s attrs fields (for ``attrs.evolve``)."""
    names = [f.alias for f in attrs.fields(type(valid)) if f.init]
    chosen = draw(st.lists(st.sampled_from(names), unique=True, min_size=1, max_size=3))
    return {name: draw(ANYTHING) for name in chosen}


def rebuilt(valid: Any, changes: dict[str, Any]) -> None:
    """Rebuild ``valid`` with ``changes``; whatever is built must be usable."""
    exercise(attempt(attrs.evolve, valid, **changes))


SMALL_OR_ANY = mostly(st.integers(-1, 8))

# -- topology: Grid -------------------------------------------------------------------------------

AXIS_NAMES = st.sampled_from(["tp", "dp", "pp", "x", "tp-dp"])
AXES = mostly(st.lists(st.sampled_from(["tp", "dp", "pp", "x"]), min_size=1, max_size=3))
SHAPES = mostly(st.lists(st.integers(1, 4), min_size=1, max_size=3))


@FUZZ
@given(AXES, SHAPES, mostly(st.integers(0, 8)), st.booleans())
def test_grid_constructor(axes: Any, shape: Any, offset: Any, as_tuples: bool) -> None:
    """Grid(axes, shape, rank_offset), positionally, with lists or tuples of anything."""
    if as_tuples:
        axes = tuple(axes) if isinstance(axes, list) else axes
        shape = tuple(shape) if isinstance(shape, list) else shape
    exercise(attempt(Grid, axes, shape, offset))
    exercise(attempt(Grid, axes=axes, shape=shape))


@FUZZ
@given(
    st.dictionaries(AXIS_NAMES | st.text(max_size=3), mostly(st.integers(1, 4)), max_size=4),
    mostly(st.integers(0, 8)),
    mostly(st.sampled_from(["tp-dp-pp", "tp", "dp-tp", "x-pp-dp-tp"])),
)
def test_grid_named_constructors(sizes: dict[str, Any], offset: Any, order: Any) -> None:
    """Grid.from_sizes and Grid.from_order with any sizes, offset and order."""
    exercise(attempt(Grid.from_sizes, rank_offset=offset, **sizes))
    exercise(attempt(Grid.from_order, order, rank_offset=offset, **sizes))


GRID_AXES = ("tp", "dp", "pp", "x")
AXIS_ARGS = mostly(st.sampled_from([*GRID_AXES, "tp-dp", "dp-x-pp"]))


@FUZZ
@given(
    grids(max_world_size=64, axis_names=GRID_AXES).flatmap(
        lambda g: st.tuples(st.just(g), mostly(ranks(g)))
    ),
    st.lists(AXIS_ARGS, max_size=3),
    st.dictionaries(st.sampled_from(GRID_AXES) | st.text(max_size=3), SMALL_OR_ANY, max_size=4),
)
def test_grid_queries(pair: tuple[Grid, Any], axes: list[Any], coord: dict[str, Any]) -> None:
    """groups, groups_in_axis_order, group_of, coord, rank, size and index_in_group with any
    rank and axes."""
    grid, rank = pair
    groups = attempt(grid.groups, *axes)
    if groups is not None:
        attempt(len, groups)
    attempt(grid.groups_in_axis_order, *axes)
    attempt(grid.group_of, rank, *axes)
    attempt(grid.coord, rank)
    attempt(grid.rank, **coord)
    attempt(grid.size, *axes)
    attempt(grid.index_in_group, rank, *axes)


KIND_ARGS = mostly(st.sampled_from([*GRID_AXES, "dp-tp", "x-pp-dp", "tp-tp", ""]))


@FUZZ
@given(
    grids(max_world_size=64, axis_names=GRID_AXES).flatmap(
        lambda g: st.tuples(mostly(st.just(g)), mostly(ranks(g)))
    ),
    mostly(st.none() | st.lists(KIND_ARGS, max_size=4)),
    KIND_ARGS,
)
def test_axis_groups(pair: tuple[Any, Any], kinds: Any, kind: Any) -> None:
    """AxisGroups(grid, kinds) and every query with any grid, kinds, rank and kind."""
    grid, rank = pair
    layout = attempt(AxisGroups, grid) if kinds is None else attempt(AxisGroups, grid, kinds)
    exercise(layout)
    if layout is None:
        return
    for query in (layout.kind, layout.size, layout.groups):
        attempt(query, kind)
    for lookup in (layout.group_of, layout.local_rank, layout.locate, layout.has_group):
        attempt(lookup, rank, kind)


# -- topology: Topology ---------------------------------------------------------------------------

SMALL = mostly(st.integers(1, 8))
FIELDS = {
    "tp": SMALL,
    "pp": SMALL,
    "cp": SMALL,
    "ep": SMALL,
    "etp": SMALL,
    "dp": SMALL,
    "vpp": SMALL,
    "order": mostly(st.permutations(["tp", "cp", "ep", "dp", "pp"]).map("-".join)),
    "rank_offset": mostly(st.integers(0, 8)),
    "dist_opt_instances": SMALL,
    "hcp_sizes": mostly(st.lists(st.integers(1, 4), max_size=3)),
    "embedding_stages": mostly(st.lists(st.integers(-3, 3), max_size=3)),
    "position_embedding_stages": mostly(st.lists(st.integers(-3, 3), max_size=3)),
}
WORLDS = mostly(st.sampled_from([1, 2, 4, 8, 16, 64, 2**40]))


@FUZZ
@given(WORLDS, st.fixed_dictionaries({}, optional=FIELDS))
def test_topology_constructors(world: Any, fields: dict[str, Any]) -> None:
    """Topology(...), Topology.megatron, from_dict and the seed conventions with any fields."""
    exercise(attempt(Topology, world, **fields))
    exercise(attempt(Topology.megatron, world, **fields))
    exercise(attempt(Topology.from_dict, {"world_size": world, **fields}))
    values = list(fields.values())[:3]
    exercise(attempt(Topology.ml_starter, world, *values[:2]))
    exercise(attempt(Topology.ezpz, world, *values))


@FUZZ
@given(mostly(st.dictionaries(st.sampled_from([*FIELDS, "world_size", "bogus"]), SMALL)))
def test_topology_from_anything(data: Any) -> None:
    """Topology.from_dict with any value, mapping or not."""
    exercise(attempt(Topology.from_dict, data))


QUERY_TOPOLOGIES = topologies(max_world_size=16)


ALL_KINDS = [*Topology(16, tp=2, pp=2, cp=2, hcp_sizes=[2], dist_opt_instances=2).kinds]
KINDS = mostly(st.sampled_from([*ALL_KINDS, "mp", "expt_dp", "cp-dp", "dense", "expert"]))
TOPOLOGY_AND_RANK = QUERY_TOPOLOGIES.flatmap(lambda t: st.tuples(st.just(t), mostly(ranks(t))))


@FUZZ
@given(TOPOLOGY_AND_RANK, KINDS, SMALL_OR_ANY)
def test_topology_queries(pair: tuple[Topology, Any], kind: Any, number: Any) -> None:
    """Every query of a Topology with any rank, kind, stage, layer count and vp_stage."""
    topo, rank = pair
    groups = attempt(topo.groups, kind)
    if groups is not None:
        attempt(len, groups)
    for query in (topo.group_of, topo.local_rank, topo.group_index, topo.locate, topo.has_group):
        attempt(query, rank, kind)
    attempt(topo.size, kind)
    attempt(topo.stage, rank)
    exercise(attempt(topo.pipeline, rank))
    attempt(topo.layers, rank, number)
    attempt(topo.is_first_stage, rank, vp_stage=number)
    attempt(topo.is_last_stage, rank, vp_stage=number)
    attempt(topo.in_embedding, rank, vp_stage=number)
    exercise(attempt(topo.rank_info, rank))


@FUZZ
@given(QUERY_TOPOLOGIES.flatmap(lambda t: st.tuples(st.just(t), ranks(t))), KINDS)
def test_rank_info_queries(pair: tuple[Topology, int], kind: Any) -> None:
    """RankInfo.group, local_rank and coord with any kind or grid name."""
    topo, rank = pair
    info = topo.rank_info(rank)
    attempt(info.group, kind)
    attempt(info.local_rank, kind)
    attempt(info.coord, kind)


@FUZZ
@given(QUERY_TOPOLOGIES, st.integers(0, 63), mostly(st.integers(-20, 20)))
def test_group_sequences(topo: Topology, which: int, value: Any) -> None:
    """A group list's public methods (indexing, membership, lookups) with any argument."""
    groups = topo.groups(topo.kinds[which % len(topo.kinds)])
    attempt(groups.__getitem__, value)
    attempt(groups.__contains__, value)
    attempt(groups.__eq__, value)
    if isinstance(groups, OrthogonalGroups):
        attempt(groups.index_of_rank, value)
        attempt(groups.build, value)


@FUZZ
@given(mostly(st.integers(0, 4)), ANYTHING)
def test_derived_groups_constructor(count: Any, make: Any) -> None:
    """DerivedGroups(count, make) with any count and any callable or value."""
    groups = attempt(DerivedGroups, count, make)
    if groups is not None:
        attempt(len, groups)
        attempt(list, groups)


# -- topology: Cluster, check, hierarchical_groups, records -----------------------------------


@FUZZ
@given(
    SMALL, mostly(st.none() | st.integers(1, 4)), mostly(st.none() | st.integers(1, 8)), ANYTHING
)
def test_cluster(gpus: Any, nodes: Any, domain: Any, rank: Any) -> None:
    """Cluster(...) positionally and its node_of, local_gpu and domain_of with any rank."""
    cluster = attempt(Cluster, gpus, nodes, domain)
    exercise(cluster)
    if cluster is not None:
        for query in (cluster.node_of, cluster.local_gpu, cluster.domain_of):
            attempt(query, rank)


CLUSTERS = st.builds(Cluster, st.sampled_from([1, 2, 4, 8]), st.none() | st.integers(1, 4))


@FUZZ
@given(mostly(QUERY_TOPOLOGIES), mostly(CLUSTERS), mostly(st.integers(1, 64)), ANYTHING)
def test_check(topo: Any, cluster: Any, limit: Any, kind: Any) -> None:
    """check(topology, cluster, max_communicators=...) and the report's queries."""
    report = attempt(check, topo, cluster, max_communicators=limit)
    exercise(report)
    if report is not None:
        attempt(report.placement, kind)
        attempt(report.codes)


@FUZZ
@given(
    mostly(st.lists(st.integers(0, 20), max_size=8) | st.just(range(8))),
    mostly(st.lists(st.integers(1, 4), max_size=3)),
)
def test_hierarchical_groups(members: Any, sizes: Any) -> None:
    """hierarchical_groups(ranks, sizes) with any ranks and sizes."""
    attempt(hierarchical_groups, members, sizes)


def _records() -> list[Any]:
    topo = Topology(8, tp=2, pp=2)
    report = check(topo, Cluster(4))
    return [
        Finding("warning", "code", "a message", (0, 1)),
        topo.pipeline(3),
        topo.rank_info(3),
        report.placements[0],
        report,
        _arrangement(),
        _arrangement().after,
    ]


def _arrangement() -> Any:
    hosts = [Host(f"n{i}", 2, (f"r{i % 2}",)) for i in range(4)]
    return place(Topology(8, tp=4), Allocation(hosts, [Tier("rack", nvlink=True)]))


@FUZZ
@given(st.sampled_from(_records()).flatmap(lambda r: st.tuples(st.just(r), evolved(r))))
def test_core_records(pair: tuple[Any, dict[str, Any]]) -> None:
    """Finding, Pipeline, RankInfo, Placement, Report, Arrangement and Crossings rebuilt with
    any field values."""
    rebuilt(*pair)


# -- topology.cost: inputs, values, collectives -----------------------------------------------


@FUZZ
@given(ANYTHING)
def test_loaders(spec: Any) -> None:
    """load_model, load_hardware and scenario with any value."""
    attempt(load_model, spec)
    attempt(load_hardware, spec)
    exercise(attempt(scenario, spec))


SMALL_MODEL = Model("small", 1e6, layers=4, hidden=64, sequence_length=128, global_batch=16)
SMALL_MOE = Model(
    "moe",
    2e6,
    layers=4,
    hidden=64,
    sequence_length=128,
    global_batch=16,
    experts=4,
    top_k=2,
    expert_parameters=1.5e6,
)
SMALL_WORK = Workload("w", samples=16, micro_batch=1, compute=20.0, gradient=50.0, layers=4)
VALUES = [
    SMALL_MODEL,
    SMALL_MOE,
    MODELS["llama-7b"],
    SMALL_WORK,
    TOY_WORKLOAD,
    TOY_GPU,
    TOY_GPU.intra,
    HARDWARE["h100"],
]


@FUZZ
@given(st.sampled_from(VALUES).flatmap(lambda v: st.tuples(st.just(v), evolved(v))), ANYTHING)
def test_cost_values(pair: tuple[Any, dict[str, Any]], argument: Any) -> None:
    """Model, Workload, Hardware and Link rebuilt with any field values, and their methods."""
    valid, changes = pair
    value = attempt(attrs.evolve, valid, **changes)
    exercise(value)
    if isinstance(value, Model):
        exercise(attempt(value.workload))
        attempt(Model.from_dict, {**value.to_dict(), **changes})
    if isinstance(value, Workload):
        attempt(value.micro_batches, argument)
    if isinstance(value, Hardware):
        attempt(value.compute_time, argument)
        attempt(value.link, argument)
    if isinstance(value, Link):
        attempt(value.time, argument)


@FUZZ
@given(mostly(st.dictionaries(st.sampled_from([f.name for f in attrs.fields(Model)]), SCALARS)))
def test_model_from_dict(data: Any) -> None:
    """Model.from_dict with any value, mapping or not."""
    exercise(attempt(Model.from_dict, data))


LINKS = mostly(st.sampled_from([TOY_GPU.intra, HARDWARE["h100"].inter]))
COUNTS = mostly(st.integers(1, 16))
AMOUNTS = mostly(st.floats(0, 1e9))


@FUZZ
@given(LINKS, COUNTS, AMOUNTS, AMOUNTS)
def test_collectives(link: Any, n: Any, size: Any, receive: Any) -> None:
    """The alpha-beta collectives with any link, group size and payload."""
    for collective in (all_reduce, all_gather, reduce_scatter, all_to_all):
        attempt(collective, link, n, size)
    attempt(p2p, link, size)
    attempt(sequential_ring, link, n, size, receive=receive)


JSON_VALUES = st.one_of(
    st.integers(-3, 100),
    st.sampled_from([0, -1, 2**53 + 1, 10**40]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=4),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
)
MODEL_JSON = st.one_of(
    st.builds(
        lambda fields, extra: json.dumps({**SMALL_MODEL.to_dict(), **fields, **extra}),
        st.dictionaries(st.sampled_from([f.name for f in attrs.fields(Model)]), JSON_VALUES),
        st.dictionaries(st.sampled_from(["bogus", "name"]), JSON_VALUES, max_size=1),
    ),
    st.sampled_from(
        [
            '{"name": "m", "parameters": Infinity, "layers": 1, "hidden": 1, '
            '"sequence_length": 1, "global_batch": 1}',
            '{"name": "m", "parameters": NaN, "layers": 1, "hidden": 1, '
            '"sequence_length": 1, "global_batch": 1}',
            '{"name": "m", "parameters": 1e999, "layers": 1, "hidden": 1, '
            '"sequence_length": 1, "global_batch": 1}',
            '{"name": "m", "parameters": 1, "layers": 1, "hidden": ' + "9" * 5000 + ", "
            '"sequence_length": 1, "global_batch": 1}',
            "[" * 100_000 + "]" * 100_000,
            "[1, 2]",
            "",
            "\x00\xff",
        ]
    ),
)


@FUZZ
@given(MODEL_JSON)
def test_model_files(text: str) -> None:
    """load_model on a file holding any JSON (or not JSON), then costing what it loaded."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.json"
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
        model = attempt(load_model, str(path))
    if model is not None:
        exercise(attempt(estimate, Topology(4, pp=2), Cluster(4), model, TOY_GPU))


# -- topology.cost: estimate, plan, result records ------------------------------------------

COST_TOPOLOGIES = mostly(topologies(max_world_size=16) | st.just(Topology(8, tp=2, pp=2)))
COST_MODELS = mostly(st.sampled_from([SMALL_MODEL, SMALL_MOE, SMALL_WORK, MODELS["llama-7b"]]))
HARDWARES = mostly(st.sampled_from(list(HARDWARE.values())))
FLAGS = mostly(st.booleans())


@FUZZ
@given(COST_TOPOLOGIES, mostly(CLUSTERS), COST_MODELS, HARDWARES, FLAGS, ANYTHING)
def test_estimate(
    topo: Any, cluster: Any, model: Any, hardware: Any, flag: Any, dimension: Any
) -> None:
    """estimate(...) with any arguments, and the estimate's queries."""
    result = attempt(estimate, topo, cluster, model, hardware, distributed_optimizer=flag)
    exercise(result)
    if result is not None:
        attempt(result.comm, dimension)
        attempt(result.link, dimension)


PLAN_WORLDS = mostly(st.sampled_from([1, 2, 4, 8, 12, 16, 64]))


@FUZZ
@given(
    PLAN_WORLDS,
    mostly(st.builds(Cluster, st.sampled_from([2, 4, 8]))),
    COST_MODELS,
    HARDWARES,
    st.fixed_dictionaries(
        {},
        optional={
            "top": mostly(st.integers(1, 4)),
            "orders": mostly(st.lists(st.sampled_from(["tp-cp-ep-dp-pp", "dp-tp-cp-ep-pp"]))),
            "vpp": mostly(st.lists(st.none() | st.integers(1, 3), max_size=3)),
            "max_tp": mostly(st.none() | st.integers(1, 8)),
            "distributed_optimizer": FLAGS,
        },
    ),
    ANYTHING,
)
def test_plan(
    world: Any, cluster: Any, model: Any, hardware: Any, options: dict[str, Any], top: Any
) -> None:
    """plan(...) with any arguments (valid worlds up to 2**6 here; bench_plan covers 2**40)."""
    if type(world) is int and 64 < world <= 2**40:
        world = 64  # a valid world: plan's speed there is benchmarks/bench_plan.py's business
    result = attempt(plan, world, cluster, model, hardware, **options)
    exercise(result)
    if result is not None:
        attempt(result.explain, top)


def _cost_records() -> list[Any]:
    result = estimate(Topology(8, tp=2, pp=2), Cluster(4), SMALL_MODEL, HARDWARE["h100"])
    assert result.memory is not None
    return [
        result,
        result.memory,
        plan(8, Cluster(4), SMALL_MODEL, top=2),
        scenario(SCENARIOS[1]),
    ]


@FUZZ
@given(st.sampled_from(_cost_records()).flatmap(lambda r: st.tuples(st.just(r), evolved(r))))
def test_cost_records(pair: tuple[Any, dict[str, Any]]) -> None:
    """Estimate, Memory, Plan and Scenario rebuilt with any field values."""
    rebuilt(*pair)
