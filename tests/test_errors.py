"""Each validation rule raises TopologyError with a pinned message; junk raises nothing else.

Messages follow the house style: one lowercase sentence that names the argument, shows the value
and the arithmetic, and ends with the fix.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from topology import Grid, Topology, TopologyError, hierarchical_groups
from topology.strategies import topologies


def raises(pattern: str) -> Any:
    """pytest.raises(TopologyError) matching ``pattern`` literally (no regex escaping needed)."""
    return pytest.raises(TopologyError, match=re.escape(pattern))


def test_topology_error_is_a_value_error() -> None:
    """TopologyError is the one error family and a ValueError."""
    assert issubclass(TopologyError, ValueError)


# -- sizes --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tp": 2.0}, "tp must be a positive int, got 2.0 (float)"),
        ({"tp": True}, "tp must be a positive int, got True (bool)"),
        ({"pp": 0}, "pp must be a positive int, got 0 (int)"),
        ({"cp": -2}, "cp must be a positive int, got -2 (int)"),
        ({"ep": "2"}, "ep must be a positive int, got '2' (str)"),
        ({"etp": 0}, "etp must be a positive int, got 0 (int)"),
        ({"dp": False}, "dp must be a positive int, got False (bool)"),
        ({"vpp": 0, "pp": 2}, "vpp must be a positive int, got 0 (int)"),
        ({"dist_opt_instances": None}, "dist_opt_instances must be a positive int, got None"),
    ],
)
def test_sizes_must_be_positive_ints(kwargs: dict[str, Any], message: str) -> None:
    """Non-int, bool, zero and negative sizes are rejected, naming the argument and value."""
    with raises(message):
        Topology(8, **kwargs)


@pytest.mark.parametrize(
    ("world", "message"),
    [
        (0, "world_size must be a positive int, got 0 (int)"),
        (-8, "world_size must be a positive int, got -8 (int)"),
        ("8", "world_size must be a positive int, got '8' (str)"),
        (8.0, "world_size must be a positive int, got 8.0 (float)"),
        (True, "world_size must be a positive int, got True (bool)"),
    ],
)
def test_world_size_must_be_a_positive_int(world: Any, message: str) -> None:
    """world_size is a positive int like every size."""
    with raises(message):
        Topology(world)


def test_world_not_divisible_by_model_parallel_product() -> None:
    """W must be a multiple of tp * cp * pp; the message shows the product and the fix."""
    with raises(
        "world_size 12 is not divisible by tp(8) * cp(1) * pp(1) = 8; "
        "valid world sizes are multiples of 8"
    ):
        Topology(12, tp=8)
    with raises("world_size 24 is not divisible by tp(2) * cp(3) * pp(3) = 18"):
        Topology(24, tp=2, cp=3, pp=3)


def test_given_dp_must_agree() -> None:
    """A dp that disagrees with W / (tp * cp * pp) is rejected with the derived value."""
    with raises(
        "dp(2) does not match world_size 8 / (tp(2) * cp(1) * pp(1)) = 4; leave dp out or pass dp=4"
    ):
        Topology(8, tp=2, dp=2)


# -- order --------------------------------------------------------------------------------------


def test_unknown_order_token() -> None:
    """An unknown token is named with the valid ones."""
    with raises("order 'tp-xp-dp' has unknown axis 'xp'; valid axes: tp, cp, ep, dp, pp"):
        Topology(8, order="tp-xp-dp")


def test_empty_order_token() -> None:
    """A doubled dash is an empty, unknown token."""
    with raises("order 'tp--dp' has unknown axis ''"):
        Topology(8, order="tp--dp")


def test_duplicate_order_token() -> None:
    """A token named twice is rejected (Megatron silently accepts it)."""
    with raises("order 'tp-dp-tp' names 'tp' twice; name each axis once"):
        Topology(8, order="tp-dp-tp")


def test_missing_order_token_with_size_above_one() -> None:
    """A left-out token whose size is above 1 is rejected with a corrected order."""
    with raises(
        "order 'dp-pp' leaves out 'tp' but tp (or etp) is 2; add 'tp' to the order, e.g. 'dp-pp-tp'"
    ):
        Topology(8, tp=2, order="dp-pp")


@pytest.mark.parametrize("order", [3, "", None])
def test_order_must_be_a_string(order: Any) -> None:
    """The order is a non-empty string."""
    with raises(f"order must be a string like 'tp-cp-ep-dp-pp', got {order!r}"):
        Topology(8, order=order)


# -- expert grid --------------------------------------------------------------------------------


def test_expert_product_must_divide_the_world() -> None:
    """etp * ep * pp must divide W; the message lists the valid ep."""
    with raises("world_size 8 is not divisible by etp(2) * ep(3) * pp(1) = 6; valid ep: 1, 2, 4"):
        Topology(8, tp=2, ep=3)


def test_edp_must_equal_dp_unless_pp_is_outermost() -> None:
    """With pp inside dp in the order, expert and dense dp sizes must agree."""
    with raises(
        "edp(1) must equal dp(4) when pp is not the outermost axis of order 'tp-ep-pp-dp-cp'; "
        "put pp last in the order or make etp * ep = tp * cp"
    ):
        Topology(16, tp=2, pp=2, ep=4, order="tp-ep-pp-dp")


def test_dense_and_expert_pipelines_must_coincide() -> None:
    """Grids that would put pipeline stages on different ranks are rejected."""
    with raises(
        "the dense and expert grids put pipeline stages on different ranks (pp stride 2 vs 1 "
        "in order 'tp-pp-cp-ep-dp'); put pp last in the order"
    ):
        Topology(16, tp=2, cp=2, etp=1, ep=4, pp=2, order="tp-pp-cp-ep-dp")


# -- vpp, hcp, distributed optimizer, stages -----------------------------------------------------


def test_vpp_needs_pipeline_stages() -> None:
    """vpp with pp = 1 is rejected."""
    with raises("vpp(2) needs pipeline stages to interleave, but pp is 1; drop vpp or use pp > 1"):
        Topology(8, vpp=2)


def test_hcp_sizes_must_multiply_to_cp() -> None:
    """Hierarchical cp levels must multiply to cp."""
    with raises("hcp_sizes [2, 3] multiply to 6 but cp is 4; give level sizes whose product is 4"):
        Topology(8, cp=4, hcp_sizes=[2, 3])


@pytest.mark.parametrize(
    ("hcp", "message"),
    [
        ([], "hcp_sizes must be a non-empty list of ints, got ()"),
        ("ab", "hcp_sizes must be a non-empty list of ints, got 'ab'"),
        ([2, 2.0], "hcp_sizes[1] must be a positive int, got 2.0 (float)"),
        ([True, 4], "hcp_sizes[0] must be a positive int, got True (bool)"),
    ],
)
def test_hcp_sizes_must_be_positive_ints(hcp: Any, message: str) -> None:
    """hcp_sizes is a non-empty list of positive ints."""
    with raises(message):
        Topology(8, cp=4, hcp_sizes=hcp)


def test_dist_opt_instances_must_divide_dp_cp() -> None:
    """Instances must divide dp * cp; the message lists the valid counts."""
    with raises("dist_opt_instances(3) must divide both dp * cp = 4 and edp = 4; valid: 1, 2, 4"):
        Topology(8, tp=2, dist_opt_instances=3)


def test_dist_opt_instances_must_divide_edp() -> None:
    """Instances must divide edp as well."""
    with raises("dist_opt_instances(4) must divide both dp * cp = 4 and edp = 2; valid: 1, 2"):
        Topology(8, tp=2, ep=4, etp=1, dist_opt_instances=4)


def test_embedding_stage_out_of_range() -> None:
    """Embedding stages must be stage indices of the pipeline."""
    with raises("embedding_stages entry 2 is out of range for pp(2); valid stages: -2 to 1"):
        Topology(8, pp=2, embedding_stages=(0, 2))


def test_embedding_stages_must_be_a_list() -> None:
    """Embedding stages are a non-empty list."""
    with raises("position_embedding_stages must be a non-empty list of stage indices, got ()"):
        Topology(8, pp=2, position_embedding_stages=())


# -- ranks, offsets, kinds ----------------------------------------------------------------------


@pytest.mark.parametrize("rank", [8, -1, 100])
def test_rank_outside_the_world(rank: int) -> None:
    """A rank outside the layout is rejected with the valid range."""
    with raises(f"rank {rank} is outside this grid; valid ranks: 0 to 7"):
        Topology(8, tp=2).group_of(rank, "tp")


def test_rank_below_the_offset() -> None:
    """With an offset, ranks below it are outside."""
    with raises("rank 3 is outside this grid; valid ranks: 4 to 11"):
        Topology(8, rank_offset=4).pipeline(3)


@pytest.mark.parametrize("rank", [1.0, "1", True, None])
def test_rank_must_be_an_int(rank: Any) -> None:
    """A rank is an int (not a bool)."""
    with raises(f"rank must be an int, got {rank!r}"):
        Topology(8).group_of(rank, "tp")


def test_negative_offset() -> None:
    """A negative offset is rejected (Megatron accepts it silently)."""
    with raises("rank_offset must be a non-negative int, got -1 (int)"):
        Topology(8, rank_offset=-1)


def test_unknown_kind_lists_the_valid_ones() -> None:
    """An unknown kind is named along with every valid kind."""
    with raises(
        "unknown kind 'xp'; valid kinds: dp-cp, dp, cp, tp-pp, tp, pp, embedding, "
        "position-embedding, tp-dp-cp, tp-dp, tp-cp, ep, etp, etp-ep, etp-ep-pp, edp"
    ):
        Topology(8).groups("xp")


def test_kinds_that_need_options_are_unknown_without_them() -> None:
    """hcp and dist-opt kinds exist only when configured."""
    with raises("unknown kind 'hcp-0'"):
        Topology(8, cp=2).groups("hcp-0")
    with raises("unknown kind 'intra-dist-opt'"):
        Topology(8).group_of(0, "intra-dist-opt")


def test_kind_must_be_a_string() -> None:
    """A kind is a string."""
    with raises("kind must be a string like 'tp', got 3"):
        Topology(8).groups(3)  # type: ignore[arg-type]


def test_rank_without_an_embedding_group() -> None:
    """A middle pipeline stage has no embedding group, and the message says why."""
    with raises(
        "rank 2 belongs to no embedding group: it is pipeline stage 1 of 4 and embedding "
        "lives on stages 0, 3"
    ):
        Topology(8, pp=4).group_of(2, "embedding")


def test_layers_needs_divisible_layer_count() -> None:
    """num_layers must split evenly into pp * vpp chunks."""
    with raises(
        "num_layers 6 is not divisible by pp(4) * vpp(1) = 4; use a positive multiple of 4"
    ):
        Topology(8, pp=4).layers(0, 6)
    with raises("stage 4 is out of range; valid stages: 0 to 3"):
        Topology(8, pp=4).layers(4, 8)


def test_vp_stage_out_of_range() -> None:
    """A virtual stage beyond vpp is rejected."""
    with raises("vp_stage 2 is not a virtual stage; valid: an int from 0 to 1 (range(vpp), vpp=2)"):
        Topology(8, pp=2, vpp=2).is_first_stage(0, vp_stage=2)


@pytest.mark.parametrize("method", ["is_first_stage", "is_last_stage", "in_embedding"])
@pytest.mark.parametrize("value", [True, False, "0", 0.0, 2, -1])
def test_vp_stage_not_a_virtual_stage(method: str, value: object) -> None:
    """Every method taking vp_stage refuses a bool, a str, a float and an int outside range(vpp),
    on every rank (also one whose stage holds no embeddings)."""
    topo = Topology(8, pp=4, vpp=2)
    for rank in (0, 2, 7):
        with raises(
            f"vp_stage {value!r} is not a virtual stage; valid: an int from 0 to 1 "
            "(range(vpp), vpp=2) or None"
        ):
            getattr(topo, method)(rank, vp_stage=value)


@pytest.mark.parametrize("method", ["is_first_stage", "is_last_stage", "in_embedding"])
def test_vp_stage_without_vpp(method: str) -> None:
    """Without vpp the only virtual stage is 0 (range(1)); 1 is refused, 0 and None agree."""
    topo = Topology(8, pp=4)
    for rank in range(8):
        assert getattr(topo, method)(rank, vp_stage=0) == getattr(topo, method)(rank)
    with raises(
        "vp_stage 1 is not a virtual stage; valid: an int from 0 to 0 (range(vpp), vpp=None) "
        "or None"
    ):
        getattr(topo, method)(0, vp_stage=1)


# -- from_dict ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1], "a topology must be a mapping of fields, got list"),
        ({"world_size": 8, "tpp": 2}, "unknown topology field 'tpp'; valid fields: world_size, tp"),
        ({"tp": 2}, "a topology needs 'world_size', e.g. {\"world_size\": 8}"),
        ({"world_size": "8"}, "world_size must be a positive int, got '8' (str)"),
        ({"world_size": 8, "hcp_sizes": 4}, "hcp_sizes must be a non-empty list of ints, got 4"),
    ],
)
def test_from_dict_rejects_bad_input(data: Any, message: str) -> None:
    """from_dict names the bad field or the missing one."""
    with raises(message):
        Topology.from_dict(data)


# -- Grid ---------------------------------------------------------------------------------------


def test_grid_unknown_axis() -> None:
    """An unknown axis is named along with the grid's axes."""
    with raises("unknown axis 'xp'; this grid has axes ('tp', 'dp', 'pp')"):
        Grid.from_order("pp-dp-tp", tp=2, dp=2, pp=2).groups("xp")


def test_grid_duplicate_axis() -> None:
    """An axis may appear once."""
    with raises("axis 'tp' appears twice in ('tp', 'tp'); name each axis once"):
        Grid(("tp", "tp"), (2, 2))
    with raises("axis 'tp' is named twice in 'tp-tp'"):
        Grid.from_sizes(tp=2).groups("tp", "tp")


@pytest.mark.parametrize(
    ("size", "kind"), [(0, "int"), (-1, "int"), (True, "bool"), (2.5, "float")]
)
def test_grid_sizes_must_be_positive_ints(size: Any, kind: str) -> None:
    """Grid sizes follow the same rule as Topology sizes."""
    with raises(f"tp must be a positive int, got {size!r} ({kind})"):
        Grid.from_sizes(tp=size)
    with raises(f"tp must be a positive int, got {size!r} ({kind})"):
        Grid.from_order("tp", tp=size)


def test_grid_order_mismatches() -> None:
    """from_order must name every sized axis once and nothing else."""
    with raises("order 'tp-dp' names axis 'dp' but no size was given for it"):
        Grid.from_order("tp-dp", tp=2)
    with raises("order 'tp' does not place axis 'dp'; add it to the order"):
        Grid.from_order("tp", tp=2, dp=2)
    with raises("order 'tp-tp' names 'tp' twice; name each axis once"):
        Grid.from_order("tp-tp", tp=2)


def test_grid_needs_an_axis() -> None:
    """An empty grid is rejected with an example."""
    with raises("from_sizes needs at least one axis, e.g. from_sizes(dp=2, tp=4)"):
        Grid.from_sizes()


def test_grid_rank_and_offset_checks() -> None:
    """Ranks, offsets and coordinates out of range are rejected."""
    grid = Grid.from_sizes(dp=2, tp=2)
    with raises("rank 4 is outside this grid; valid ranks: 0 to 3"):
        grid.coord(4)
    with raises("rank_offset must be a non-negative int, got -1 (int)"):
        Grid.from_sizes(tp=2, rank_offset=-1)
    with raises("coordinate tp=2 is out of range; valid: 0 to 1"):
        grid.rank(tp=2, dp=0)
    with raises("rank() needs a coordinate for axis 'dp'"):
        grid.rank(tp=1)


def test_grid_axis_names() -> None:
    """Axis names are non-empty strings without '-'."""
    with raises("axis name 'a-b' is not valid; use a non-empty string without '-', e.g. 'tp'"):
        Grid(("a-b",), (2,))


def test_hierarchical_sizes_must_cover_the_ranks() -> None:
    """hierarchical_groups needs sizes whose product is the number of ranks."""
    with raises("sizes (2, 2) multiply to 4 but 8 ranks were given; give sizes whose product is 8"):
        hierarchical_groups(range(8), [2, 2])


# -- junk never raises anything but TopologyError ------------------------------------------------

JUNK = st.one_of(
    st.integers(-3, 70),
    st.integers(-(2**40), 2**40),
    st.sampled_from([0, -1, 2**40, 2**31 - 1]),
    st.booleans(),
    st.floats(),
    st.text(max_size=6),
    st.none(),
    st.lists(st.integers(-2, 9), max_size=4),
    st.tuples(st.text(max_size=3)),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)


def rarely_junk(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``valid`` nine times in ten, junk otherwise (deep paths need mostly valid input)."""
    return st.integers(0, 9).flatmap(lambda k: JUNK if k == 0 else valid)


SMALL = st.one_of(st.integers(1, 8), JUNK)
ORDERS = st.one_of(
    st.permutations(["tp", "cp", "ep", "dp", "pp"]).map("-".join),
    st.text(alphabet="tpcedPT-x", max_size=16),
    JUNK,
)
FIELDS = {
    "tp": SMALL,
    "pp": SMALL,
    "cp": SMALL,
    "ep": SMALL,
    "etp": SMALL,
    "dp": SMALL,
    "vpp": SMALL,
    "order": ORDERS,
    "rank_offset": SMALL,
    "dist_opt_instances": SMALL,
    "hcp_sizes": JUNK,
    "embedding_stages": JUNK,
    "position_embedding_stages": JUNK,
}
KINDS = st.one_of(
    st.sampled_from(
        [
            "tp",
            "dp",
            "cp-dp",
            "mp",
            "expt_dp",
            "embedding",
            "hcp-0",
            "hcp-7",
            "intra-dist-opt",
            "inter-edp",
            "edp",
            "etp-ep-pp",
            "pp-tp",
            "tp-tp",
            "",
            "-",
        ]
    ),
    JUNK,
)
FUZZ = settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])


def only_topology_errors(call: Any, *args: Any, **kwargs: Any) -> Any:
    """Call and return the result, or None if it raised TopologyError (anything else escapes)."""
    try:
        return call(*args, **kwargs)
    except TopologyError:
        return None


@FUZZ
@given(st.one_of(st.integers(-3, 4096), JUNK), st.fixed_dictionaries({}, optional=FIELDS))
def test_junk_topology_arguments_raise_only_topology_error(world: Any, fields: Any) -> None:
    """Topology(...) with any junk raises TopologyError or builds a valid value."""
    if isinstance(world, int) and world > 4096:
        world = 4096
    topo = only_topology_errors(Topology, world, **fields)
    if topo is not None:
        assert Topology.from_dict(topo.to_dict()) == topo


@FUZZ
@given(
    topologies(max_world_size=16),
    rarely_junk(st.integers(-1, 40)),
    KINDS,
    rarely_junk(st.integers(-1, 8)),
)
def test_junk_queries_raise_only_topology_error(
    topo: Topology, rank: Any, kind: Any, number: Any
) -> None:
    """group_of, groups and the other queries, fed junk, raise only TopologyError."""
    only_topology_errors(topo.group_of, rank, kind)
    only_topology_errors(topo.groups, kind)
    only_topology_errors(topo.size, kind)
    only_topology_errors(topo.local_rank, rank, kind)
    only_topology_errors(topo.has_group, rank, kind)
    only_topology_errors(topo.pipeline, rank)
    only_topology_errors(topo.rank_info, rank)
    only_topology_errors(topo.layers, rank, number)
    only_topology_errors(topo.is_first_stage, rank, vp_stage=number)
    only_topology_errors(topo.in_embedding, rank, vp_stage=number)
    only_topology_errors(Topology.from_dict, {**topo.to_dict(), "tp": number})


GOOD_AXES = ["tp", "dp", "pp", "x"]
AXIS_NAMES = st.one_of(st.sampled_from([*GOOD_AXES, "tp-dp"]), st.text(max_size=3))


@FUZZ
@given(
    st.dictionaries(
        st.integers(0, 9).flatmap(lambda k: AXIS_NAMES if k == 0 else st.sampled_from(GOOD_AXES)),
        rarely_junk(st.integers(1, 4)),
        max_size=4,
    ),
    rarely_junk(st.integers(0, 3)),
    rarely_junk(AXIS_NAMES),
    rarely_junk(st.integers(-1, 70)),
    st.data(),
)
def test_junk_grid_arguments_raise_only_topology_error(
    sizes: Any, offset: Any, axis: Any, rank: Any, data: st.DataObject
) -> None:
    """Grid.from_sizes / from_order and the grid queries, fed junk, raise only TopologyError."""
    order = data.draw(rarely_junk(st.permutations(list(sizes)).map("-".join)))
    grids = [
        only_topology_errors(Grid.from_sizes, rank_offset=offset, **sizes),
        only_topology_errors(Grid.from_order, order, rank_offset=offset, **sizes),
    ]
    event(f"{sum(g is not None for g in grids)} valid grids")
    for grid in grids:
        if grid is None or grid.world_size > 4096:
            continue
        only_topology_errors(grid.group_of, rank, axis)
        only_topology_errors(grid.groups, axis)
        only_topology_errors(grid.coord, rank)
        only_topology_errors(grid.index_in_group, rank, axis)
        only_topology_errors(grid.size, axis)
        only_topology_errors(grid.rank, **{str(axis): rank})


def test_worlds_beyond_2_to_the_40_are_rejected() -> None:
    """A world larger than 2**40 ranks is refused at construction, by Topology and by Grid."""
    with raises("world_size 18446744073709551616 is larger than 1099511627776 (2**40)"):
        Topology(2**64, tp=2)
    with raises(r"this grid has 18446744073709551616 ranks, more than 1099511627776"):
        Grid.from_sizes(dp=2**32, tp=2**32)


def test_the_largest_world_answers_queries() -> None:
    """A 2**40-rank world builds and answers group queries and error messages promptly."""
    topo = Topology(2**40, tp=8, pp=4)
    assert topo.groups("tp")[:1] == [(0, 1, 2, 3, 4, 5, 6, 7)]
    assert topo.group_of(2**40 - 1, "pp")[0] == 2**40 - 1 - 3 * 2**38
    with raises("valid ep: 1, 2, 4"):
        Topology(2**40, tp=8, pp=4, ep=3)


def test_rank_info_unknown_kind_raises_topology_error() -> None:
    """RankInfo.group with an unknown kind raises TopologyError like Topology.group_of."""
    with raises("unknown kind 'xp'"):
        Topology(8, tp=2).rank_info(3).group("xp")


def test_layers_refuses_absurd_layer_counts() -> None:
    """layers() with more than 2**20 layers raises TopologyError instead of exhausting memory."""
    with raises("num_layers must be at most 1048576 (2**20), the most layers rank-topology places"):
        Topology(1).layers(0, 2**35)


def test_rank_info_coord_rejects_unknown_grid() -> None:
    """RankInfo.coord with a grid other than dense/expert raises TopologyError."""
    with raises("grid must be 'dense' or 'expert', got 'bogus'"):
        Topology(8, tp=2).rank_info(3).coord("bogus")


def test_rank_info_accepts_megatron_names() -> None:
    """RankInfo.group('mp') is the rank's tp-pp group, as group_of(rank, 'mp') is."""
    topo = Topology(8, tp=2, pp=2)
    assert topo.rank_info(3).group("mp") == topo.group_of(3, "mp")


# -- Grid built positionally, hierarchical_groups, huge ints -------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("tp", 2), "axes must be a non-empty tuple of names like ('dp', 'tp'), got 'tp'"),
        ((("tp",), 2), "shape must be a tuple of sizes, one per axis of ('tp',), got 2"),
        ((("tp",), ("2",)), "tp must be a positive int, got '2' (str)"),
        ((("tp",), (2,), "0"), "rank_offset must be a non-negative int, got '0' (str)"),
        (({"tp"}, [2]), "axes must be a non-empty tuple of names like ('dp', 'tp'), got {'tp'}"),
    ],
)
def test_grid_built_positionally_checks_types(args: tuple[Any, ...], message: str) -> None:
    """Grid(axes, shape, rank_offset) with ill-typed arguments names the argument."""
    with raises(message):
        Grid(*args)


@pytest.mark.parametrize(
    ("members", "sizes", "message"),
    [
        (5, [1], "ranks must be a list of ints (e.g. range(8)), got 5 (int)"),
        (None, [1], "ranks must be a list of ints (e.g. range(8)), got None (NoneType)"),
        ("ab", [2], "ranks must be a list of ints (e.g. range(8)), got 'ab' (str)"),
        (range(2), 5, "sizes must be a non-empty list of positive ints, got 5"),
        ([0, 0], [2], "ranks[1] = 0 repeats an earlier rank"),
        (["a", 1], [2], "ranks[0] must be a non-negative int, got 'a' (str)"),
        ([[0], 1], [2], "ranks[0] must be a non-negative int, got [0] (list)"),
    ],
)
def test_hierarchical_groups_checks_its_arguments(members: Any, sizes: Any, message: str) -> None:
    """hierarchical_groups with a non-sequence, non-int or repeated rank raises TopologyError."""
    with raises(message):
        hierarchical_groups(members, sizes)


def test_hierarchical_groups_accepts_a_range_without_copying_first() -> None:
    """A range whose length does not match is refused before any rank is listed."""
    with raises("sizes (2, 2) multiply to 4 but 1099511627776 ranks were given"):
        hierarchical_groups(range(2**40), [2, 2])


def test_huge_ints_are_shown_not_converted() -> None:
    """An int too long for str() still gets a one-line message (not Python's ValueError)."""
    with raises("world_size <int of about 5001 digits> is larger than 1099511627776 (2**40)"):
        Topology(10**5000)
    with raises("tp must be at most 1099511627776 (2**40), the most ranks rank-topology lays out"):
        Topology(8, tp=10**5000)
    with raises("coordinate tp=<int of about 5001 digits> is out of range"):
        Grid.from_sizes(tp=2).rank(tp=10**5000)
    with raises("rank <int of about 5001 digits> is outside this grid"):
        Grid.from_sizes(tp=2).coord(10**5000)


def test_rank_offset_is_bounded() -> None:
    """A rank offset beyond 2**40 is refused, so every rank stays a modest int."""
    with raises(
        "rank_offset must be at most 1099511627776 (2**40), the most ranks rank-topology lays "
        "out, got 1099511627777"
    ):
        Topology(8, rank_offset=2**40 + 1)


def test_messages_survive_a_value_whose_repr_raises() -> None:
    """A value whose __repr__ raises is named by its type in the message."""

    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    with raises("tp must be a positive int, got <Broken object> (Broken)"):
        Topology(8, tp=Broken())  # type: ignore[arg-type]
