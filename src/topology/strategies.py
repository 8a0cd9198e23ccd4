"""Hypothesis strategies for grids, topologies and ranks (needs the ``hypothesis`` extra).

Every value is built constructively, so it is valid by construction and shrinks toward the
simplest case: a small world, sizes of 1, Megatron's default order, no offset, no MoE folding.
Bounds are keyword-only; a bad bound raises ``hypothesis.errors.InvalidArgument`` when drawn.

>>> from hypothesis import given
>>> from topology.strategies import topologies, ranks
>>> @given(topologies(max_world_size=16).flatmap(lambda t: ranks(t).map(lambda r: (t, r))))
... def test_rank_is_in_its_tp_group(pair):
...     topo, rank = pair
...     assert rank in topo.group_of(rank, "tp")
>>> test_rank_is_in_its_tp_group()
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from math import gcd, prod

try:  # a missing hypothesis names the extra that installs it
    from hypothesis import assume
    from hypothesis import strategies as st
    from hypothesis.errors import InvalidArgument
except ModuleNotFoundError as error:
    if error.name != "hypothesis":
        raise
    raise ModuleNotFoundError(
        "topology.strategies needs hypothesis: pip install 'rank-topology[hypothesis]'",
        name="hypothesis",
    ) from error

from ._args import check_index, check_size, divisors
from ._errors import TopologyError
from ._layout.axis_groups import AxisGroups
from ._layout.grid import Grid
from ._megatron.kinds import TABLE, canonical_kind
from ._megatron.topology import Topology
from ._modules.module import Module
from ._modules.modules import Modules

__all__ = ["grids", "modules", "ranks", "topologies"]

_AXIS_POOL = ("tp", "cp", "ep", "dp", "pp", "x", "y", "z")
_DEFAULT_ORDER = ("tp", "cp", "ep", "dp", "pp")
_DIST_OPT_KINDS = tuple(s.name for s in TABLE if s.needs == "dist_opt_instances")
_ALWAYS_KINDS = tuple(s.name for s in TABLE if s.needs is None)
_GTP_KINDS = {s.name: s.needs for s in TABLE if s.needs in ("gtp", "egtp")}


def _check_int(name: str, value: object, low: int) -> int:
    """The core's positive- (``low=1``) or non-negative-int rule, as hypothesis's error."""
    try:
        return (check_index if low == 0 else check_size)(name, value, at_most=None)
    except TopologyError as error:
        raise InvalidArgument(str(error)) from None


@st.composite
def _bounded_sizes(draw: st.DrawFn, count: int, budget: int, cap: int) -> list[int]:
    """``count`` sizes of at most ``cap`` whose product is at most ``budget`` (each shrinks to 1).

    The sizes take their share of the budget in a drawn order, so no position is favoured.
    """
    sizes = [1] * count
    for index in draw(st.permutations(range(count))):
        size = draw(st.integers(1, max(1, min(cap, budget))))
        budget //= size
        sizes[index] = size
    return sizes


def grids(
    *,
    min_axes: int = 1,
    max_axes: int = 4,
    max_world_size: int = 64,
    axis_names: Sequence[str] = _AXIS_POOL,
    max_rank_offset: int = 16,
) -> st.SearchStrategy[Grid]:
    """Grids of ``min_axes`` to ``max_axes`` distinct axes over at most ``max_world_size`` ranks.

    Args:
        min_axes, max_axes: how many axes (at least 1, at most ``len(axis_names)``).
        max_world_size: the largest product of sizes.
        axis_names: the names to pick from, in the order they shrink toward.
        max_rank_offset: the largest ``rank_offset`` (0 for grids that start at rank 0).

    >>> grids(max_world_size=8).example().world_size <= 8  # doctest: +SKIP
    True
    """
    return _grids(min_axes, max_axes, max_world_size, tuple(axis_names), max_rank_offset)


@st.composite
def _grids(
    draw: st.DrawFn,
    min_axes: int,
    max_axes: int,
    max_world_size: int,
    axis_names: tuple[str, ...],
    max_rank_offset: int,
) -> Grid:
    _check_int("min_axes", min_axes, 1)
    _check_int("max_axes", max_axes, 1)
    if max_axes < min_axes:
        raise InvalidArgument(f"max_axes({max_axes}) must be at least min_axes({min_axes})")
    _check_int("max_world_size", max_world_size, 1)
    _check_int("max_rank_offset", max_rank_offset, 0)
    if len(set(axis_names)) != len(axis_names) or not all(
        isinstance(name, str) and name and "-" not in name for name in axis_names
    ):
        raise InvalidArgument(f"axis_names must be distinct names without '-', got {axis_names!r}")
    if max_axes > len(axis_names):
        raise InvalidArgument(
            f"max_axes={max_axes} needs at least {max_axes} axis_names, got {len(axis_names)}"
        )
    count = draw(st.integers(min_axes, max_axes))
    names = draw(st.permutations(axis_names))[:count]
    sizes = draw(_bounded_sizes(count, max_world_size, max_world_size))
    offset = draw(st.integers(0, max_rank_offset))
    return Grid(tuple(names), tuple(sizes), offset)


def topologies(
    *,
    max_world_size: int = 64,
    kinds: Iterable[str] | None = None,
    moe: bool = True,
    max_size: int = 8,
    max_rank_offset: int = 16,
    max_vpp: int = 4,
    max_hcp_levels: int = 3,
    gtp: bool = False,
) -> st.SearchStrategy[Topology]:
    """Valid :class:`~topology.Topology` values over at most ``max_world_size`` ranks.

    Sizes are drawn as bounded factors of the world, the order as a permutation of Megatron's
    five tokens (sometimes without its size-1 tokens), and the expert sizes (etp, ep), the
    hierarchical cp levels, the distributed-optimizer instances, vpp, the embedding stages,
    the rank offset and, with ``gtp=True``, Megatron's GTP sizes (gtp, egtp: factors of dp and
    edp) among the values that keep the layout valid.

    Args:
        max_world_size: the largest world size.
        kinds: group kinds every drawn topology must define, e.g. ``["hcp-1"]`` (at least two
            hierarchical cp levels) or ``["intra-dist-opt"]`` (dist_opt_instances > 1).
        moe: allow expert folding (ep > 1 or etp != tp); False keeps ep = 1 and etp = tp.
        max_size: the largest tp, cp, pp or dp drawn (dp may exceed it by the dist-opt factor).
        max_rank_offset: the largest ``rank_offset``.
        max_vpp: the largest virtual pipeline size drawn when pp > 1.
        max_hcp_levels: the most hierarchical cp levels.
        gtp: also draw Megatron's GTP axes (gtp or egtp > 1); False (the default) keeps both 1,
            so the layouts are those of megatron-core 0.16.

    >>> topologies(max_world_size=8).example().world_size <= 8  # doctest: +SKIP
    True
    """
    return _topologies(
        max_world_size,
        None if kinds is None else tuple(kinds),
        moe,
        max_size,
        max_rank_offset,
        max_vpp,
        max_hcp_levels,
        gtp,
    )


def _required(kinds: tuple[str, ...] | None, max_hcp_levels: int) -> tuple[int, bool, set[str]]:
    """(minimum hcp levels, dist-opt instances needed, GTP sizes that must exceed 1) for
    ``kinds``; raise on unknown kinds."""
    levels, dist_opt, gtp_axes = 0, False, set()
    for kind in kinds or ():
        if not isinstance(kind, str):
            raise InvalidArgument(f"kinds must be kind names like 'tp', got {kind!r}")
        name = canonical_kind(kind)
        if name in _DIST_OPT_KINDS:
            dist_opt = True
        elif name in _GTP_KINDS:
            gtp_axes.add(str(_GTP_KINDS[name]))
        elif name.startswith("hcp-") and name[4:].isdigit():
            levels = max(levels, int(name[4:]) + 1)
        elif name not in _ALWAYS_KINDS:
            raise InvalidArgument(f"unknown kind {kind!r} in kinds")
    if levels > max_hcp_levels:
        raise InvalidArgument(
            f"kinds need {levels} hierarchical cp levels but max_hcp_levels={max_hcp_levels}"
        )
    if dist_opt and gtp_axes:
        raise InvalidArgument(
            f"kinds {kinds!r} need distributed-optimizer instances and a GTP axis, which "
            "Megatron does not combine"
        )
    return levels, dist_opt, gtp_axes


def _gtp_choices(
    given: dict[str, object], dp: int, edp: int, needed: set[str]
) -> list[tuple[int, int]]:
    """The (gtp, egtp) pairs that keep ``given`` valid, (1, 1) first, among factors of dp and
    edp; only those larger than 1 where ``needed`` says so."""
    choices = []
    for g in divisors(dp):
        for e in divisors(edp):
            if ("gtp" in needed and g == 1) or ("egtp" in needed and e == 1):
                continue
            try:
                Topology(**{**given, "gtp": g, "egtp": e})  # type: ignore[arg-type]
            except TopologyError:
                continue
            choices.append((g, e))
    return choices


def _expert_fits(order: Sequence[str], dense: dict[str, int], expert: dict[str, int]) -> bool:
    """True if an expert grid with ``expert`` sizes shares the dense grid's pipeline stages."""
    pp = dense["pp"]
    if pp == 1:
        return True
    before = order[: order.index("pp")]
    after = order[order.index("pp") + 1 :]
    outermost = all(dense[t] == 1 and expert[t] == 1 for t in after)
    if not outermost and expert["dp"] != dense["dp"]:
        return False
    return prod(dense[t] for t in before) == prod(expert[t] for t in before)


@st.composite
def _topologies(
    draw: st.DrawFn,
    max_world_size: int,
    kinds: tuple[str, ...] | None,
    moe: bool,
    max_size: int,
    max_rank_offset: int,
    max_vpp: int,
    max_hcp_levels: int,
    gtp: bool,
) -> Topology:
    _check_int("max_world_size", max_world_size, 1)
    _check_int("max_size", max_size, 1)
    _check_int("max_rank_offset", max_rank_offset, 0)
    _check_int("max_vpp", max_vpp, 1)
    _check_int("max_hcp_levels", max_hcp_levels, 0)
    if not isinstance(moe, bool):
        raise InvalidArgument(f"moe must be a bool, got {moe!r}")
    if not isinstance(gtp, bool):
        raise InvalidArgument(f"gtp must be a bool, got {gtp!r}")
    min_levels, need_dist_opt, need_gtp = _required(kinds, max_hcp_levels)
    if need_gtp and not gtp:
        raise InvalidArgument(f"kinds {kinds!r} need a GTP axis but gtp=False")
    budget = max_world_size
    instances = 1
    if need_dist_opt:
        if max_world_size < 2:
            raise InvalidArgument("distributed-optimizer kinds need max_world_size >= 2")
        instances = draw(st.integers(2, max_world_size))
        budget //= instances

    tp, cp, pp, dp_rest = draw(_bounded_sizes(4, budget, max_size))
    dp = dp_rest * instances
    dense = {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp}
    world = tp * cp * dp * pp
    order = list(draw(st.permutations(_DEFAULT_ORDER)))

    etp, ep = tp, 1
    if moe:
        # etp * ep must divide the ranks of one pipeline stage, leaving edp divisible by the
        # instances; sampled_from shrinks toward its first choice, (tp, 1): no folding.
        stage = tp * cp * dp_rest
        choices = [(tp, 1)]
        for e_tp in divisors(stage):
            for e_p in divisors(stage // e_tp):
                if (e_tp, e_p) == (tp, 1):
                    continue
                edp = world // (e_tp * e_p * pp)
                expert = {"tp": e_tp, "cp": 1, "ep": e_p, "dp": edp, "pp": pp}
                if _expert_fits(order, dense, expert):
                    choices.append((e_tp, e_p))
        etp, ep = draw(st.sampled_from(choices))
    edp = world // (etp * ep * pp)
    expert_sizes = {"tp": etp, "cp": 1, "ep": ep, "dp": edp, "pp": pp}

    if draw(st.booleans()):
        # Leave out tokens whose size is 1 in both grids (Megatron appends them); this moves
        # only size-1 axes, so the layout does not change.
        keep = [t for t in order if dense[t] > 1 or expert_sizes[t] > 1 or draw(st.booleans())]
        if keep:
            order = keep

    if not need_dist_opt and not need_gtp:
        instances = draw(st.sampled_from(divisors(gcd(dp * cp, edp))))

    hcp_sizes: tuple[int, ...] | None = None
    levels = draw(st.integers(min_levels, max_hcp_levels)) if min_levels else 0
    if not min_levels and max_hcp_levels and draw(st.booleans()):
        levels = draw(st.integers(1, max_hcp_levels))
    if levels:
        parts: list[int] = []
        rest = cp
        for _ in range(levels - 1):
            part = draw(st.sampled_from(divisors(rest)))
            parts.append(part)
            rest //= part
        hcp_sizes = (*parts, rest)

    vpp = None
    if pp > 1 and draw(st.booleans()):
        vpp = draw(st.integers(1, max_vpp))

    embedding: tuple[int, ...] = (0, -1)
    position: tuple[int, ...] = (0,)
    if draw(st.booleans()):
        stages = st.lists(st.integers(0, pp - 1), min_size=1, max_size=pp, unique=True)
        embedding = tuple(draw(stages))
        position = tuple(draw(stages))

    given: dict[str, object] = {
        "world_size": world,
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "ep": ep,
        "etp": None if etp == tp and not draw(st.booleans()) else etp,
        "vpp": vpp,
        "order": "-".join(order),
        "rank_offset": draw(st.integers(0, max_rank_offset)),
        "dist_opt_instances": instances,
        "hcp_sizes": hcp_sizes,
        "embedding_stages": embedding,
        "position_embedding_stages": position,
    }
    g, e = 1, 1
    if gtp and instances == 1 and (need_gtp or draw(st.booleans())):
        # sampled_from shrinks toward its first choice, (1, 1): no GTP axis.
        choices = _gtp_choices(given, dp, edp, need_gtp)
        assume(choices)
        g, e = draw(st.sampled_from(choices))
    return Topology(
        **given,  # type: ignore[arg-type]
        dp=None if not draw(st.booleans()) else dp // g,
        gtp=g,
        egtp=e,
    )


def ranks(topology: Topology | Grid) -> st.SearchStrategy[int]:
    """The ranks of ``topology`` (or of a grid), shrinking toward its first rank.

    >>> from topology import Topology
    >>> ranks(Topology(8, tp=2, rank_offset=8)).example() in range(8, 16)  # doctest: +SKIP
    True
    """
    return _ranks(topology)


@st.composite
def _ranks(draw: st.DrawFn, topology: Topology | Grid) -> int:
    if not isinstance(topology, (Topology, Grid)):
        raise InvalidArgument(f"ranks() needs a Topology or Grid, got {topology!r}")
    first = topology.rank_offset
    return draw(st.integers(first, first + topology.world_size - 1))


def modules(
    *,
    max_modules: int = 3,
    max_module_size: int = 16,
    colocated: bool | None = None,
    moe: bool = True,
) -> st.SearchStrategy[Modules]:
    """Valid :class:`~topology.Modules`: 1 to ``max_modules`` modules, colocated or disjoint.

    Each module is a :class:`~topology.Topology` or an :class:`~topology.AxisGroups` (a grid's
    axes, plus all of them as one kind) of at most ``max_module_size`` ranks, named ``m0``,
    ``m1``, ... Colocated modules share one world size (the first module's); disjoint ones tile
    ``[0, world_size)`` in a drawn order, not necessarily the order of the list.

    Args:
        max_modules: the most modules (at least 1).
        max_module_size: the largest world size of one module.
        colocated: True or False to draw only that shape; None (the default) draws both.
        moe: allow expert folding in the Topology modules (see :func:`topologies`).

    >>> modules(max_modules=2).example().world_size <= 32  # doctest: +SKIP
    True
    """
    return _modules(max_modules, max_module_size, colocated, moe)


def _axis_groups(grid: Grid) -> AxisGroups:
    whole = ("-".join(grid.axes),) if len(grid.axes) > 1 else ()
    return AxisGroups(grid, kinds=(*grid.axes, *whole))


def _layouts(max_size: int, moe: bool) -> st.SearchStrategy[Topology | AxisGroups]:
    return st.one_of(
        topologies(max_world_size=max_size, max_rank_offset=0, moe=moe, max_hcp_levels=1),
        grids(max_axes=3, max_world_size=max_size, max_rank_offset=0).map(_axis_groups),
    )


@st.composite
def _layout_of_size(draw: st.DrawFn, world_size: int) -> Topology | AxisGroups:
    """A layout over exactly ``world_size`` ranks (a Topology or a two-axis grid)."""
    first = draw(st.sampled_from(divisors(world_size)))
    second = draw(st.sampled_from(divisors(world_size // first)))
    if draw(st.booleans()):
        return Topology(world_size, tp=first, pp=second)
    rest = world_size // (first * second)
    return _axis_groups(Grid.from_sizes(x=first, y=second, z=rest))


@st.composite
def _modules(
    draw: st.DrawFn, max_modules: int, max_module_size: int, colocated: bool | None, moe: bool
) -> Modules:
    _check_int("max_modules", max_modules, 1)
    _check_int("max_module_size", max_module_size, 1)
    if colocated not in (None, True, False):
        raise InvalidArgument(f"colocated must be None, True or False, got {colocated!r}")
    count = draw(st.integers(1, max_modules))
    shared = draw(st.booleans()) if colocated is None else colocated
    first = draw(_layouts(max_module_size, moe))
    layouts = [first]
    for _ in range(count - 1):
        layouts.append(
            draw(_layout_of_size(first.world_size))
            if shared
            else draw(_layouts(max_module_size, moe))
        )
    offsets = [0] * count
    if not shared:
        start = 0
        for index in draw(st.permutations(range(count))):
            offsets[index] = start
            start += layouts[index].world_size
    return Modules(
        [Module(f"m{i}", layout, rank_offset=offsets[i]) for i, layout in enumerate(layouts)]
    )
