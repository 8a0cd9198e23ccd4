"""The kinds that are no plain set of grid axes: embeddings, hcp levels, dist-opt splits (private).

Each is a :class:`Derived`: how big one group is, its groups as a lazy :class:`DerivedGroups`,
how a rank finds its group (group index, local rank), which ranks belong at all, and the groups'
translate :class:`~topology._layout.spans.Shape` for placement. The kind
table (:mod:`.kinds`) holds one per derived kind; ``name`` is the concrete kind name
(``"embedding"``, ``"hcp-1"``), so one Derived can serve a family of kinds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Protocol

import attrs

from .._errors import TopologyError
from .._layout.grid import Grid
from .._layout.groups import DerivedGroups, OrthogonalGroups, Ranks
from .._layout.hierarchy import level_grid
from .._layout.kind import Kind
from .._layout.runs import normal, split
from .._layout.spans import Shape

__all__ = [
    "DP_REPLICATE",
    "DP_SHARD",
    "EMBEDDING",
    "HCP_LEVEL",
    "INTER_EDP",
    "INTRA_DIST_OPT",
    "INTRA_DP_CP",
    "INTRA_EDP",
    "POSITION_EMBEDDING",
    "Derived",
    "KindSource",
    "grid_locate",
    "splits_dp",
]


class KindSource(Protocol):
    """What the kind table reads of a topology; Topology satisfies it without being imported."""

    @property
    def world_size(self) -> int: ...
    @property
    def rank_offset(self) -> int: ...
    @property
    def pp(self) -> int: ...
    @property
    def gtp(self) -> int: ...
    @property
    def egtp(self) -> int: ...
    @property
    def edp(self) -> int: ...
    @property
    def dist_opt_instances(self) -> int: ...
    @property
    def hcp_sizes(self) -> tuple[int, ...] | None: ...
    @property
    def embedding_stages(self) -> tuple[int, ...]: ...
    @property
    def position_embedding_stages(self) -> tuple[int, ...]: ...
    @property
    def dense(self) -> Grid: ...
    @property
    def expert(self) -> Grid | None: ...
    def stage(self, rank: int) -> int: ...
    def kind(self, name: str) -> Kind: ...


def _everyone(topo: KindSource, name: str, rank: int) -> bool:
    return True


@attrs.frozen
class Derived:
    """How one derived kind sizes, lists and locates its groups, and who belongs to one."""

    size: Callable[[KindSource, str], int]
    """How many ranks one group holds."""
    groups: Callable[[KindSource, str], DerivedGroups]
    """All groups, lazily, in Megatron's order."""
    locate: Callable[[KindSource, str, int], tuple[int, int]]
    """``(group index, local rank)`` of a member rank; raises for a rank in no group."""
    has_group: Callable[[KindSource, str, int], bool] = _everyone
    """True if the rank belongs to some group (only embeddings can say no)."""
    shape: Callable[[KindSource, str], Shape | None] = attrs.field(kw_only=True)
    """The groups as translates of one offset set, or None when they are no such family."""
    per_parent: Callable[[KindSource], int] | None = attrs.field(default=None, kw_only=True)
    """For a distributed-optimizer split, whose groups alone can be irregular: how many groups
    cut one parent group (the dp-cp, dp or edp group it splits, or the world), groups
    ``k * n .. k * n + n - 1`` cutting parent ``k``; None for the other kinds."""


def _place(topo: KindSource, name: str) -> tuple[Grid, tuple[str, ...]]:
    """The grid and axes of grid kind ``name`` of ``topo``."""
    kind = topo.kind(name)
    assert kind.grid is not None  # only asked of grid kinds
    return kind.grid, kind.axes


def _instances(topo: KindSource) -> int:
    return topo.dist_opt_instances


def grid_locate(grid: Grid, axes: tuple[str, ...], rank: int) -> tuple[int, int]:
    """``(group index, local rank)`` of ``rank`` among ``grid``'s groups along ``axes``."""
    index = grid.groups(*axes).index_of_rank(rank)
    return index or 0, grid.index_in_group(rank, *axes)


def _chunk(index: int, width: int) -> range:
    return range(index * width, (index + 1) * width)


# -- embeddings: some pipeline stages of each pipeline -------------------------------------------


def _embedding_groups(topo: KindSource, stages: tuple[int, ...]) -> DerivedGroups:
    pp_groups = topo.dense.groups("pp")
    return DerivedGroups(len(pp_groups), lambda i: pp_groups.ranks(i).take(stages))


def _embedding_locate(
    topo: KindSource, name: str, stages: tuple[int, ...], rank: int
) -> tuple[int, int]:
    stage = topo.stage(rank)
    if stage not in stages:
        where = ", ".join(map(str, stages))
        raise TopologyError(
            f"rank {rank} belongs to no {name} group: it is pipeline stage {stage} of "
            f"{topo.pp} and {name} lives on stages {where}"
        )
    pipeline_index = topo.dense.groups("pp").index_of_rank(rank)
    return pipeline_index or 0, stages.index(stage)


def _embedding_shape(topo: KindSource, stages: tuple[int, ...]) -> Shape:
    (pp_digit,), rest = topo.dense.digits("pp")
    points = tuple(stage * pp_digit[1] for stage in stages)
    first = topo.rank_offset + points[0]
    steps = {b - a for a, b in pairwise(points)}
    if len(points) == 1 or len(steps) == 1:
        step = points[1] - points[0] if len(points) > 1 else 1
        return Shape.regular([(len(points), step)], rest, first)
    return Shape(None, tuple(p - points[0] for p in points), normal(rest), first)


def _embedding(stages: Callable[[KindSource], tuple[int, ...]]) -> Derived:
    """The ranks of the pipeline stages ``stages(topo)`` of each pipeline."""
    return Derived(
        lambda topo, name: len(stages(topo)),
        lambda topo, name: _embedding_groups(topo, stages(topo)),
        lambda topo, name, rank: _embedding_locate(topo, name, stages(topo), rank),
        lambda topo, name, rank: topo.stage(rank) in stages(topo),
        shape=lambda topo, name: _embedding_shape(topo, stages(topo)),
    )


EMBEDDING = _embedding(lambda topo: topo.embedding_stages)
"""Word embeddings: the ranks of the ``embedding_stages`` of each pipeline."""

POSITION_EMBEDDING = _embedding(lambda topo: topo.position_embedding_stages)
"""Position embeddings: the ranks of the ``position_embedding_stages`` of each pipeline."""


# -- hierarchical context parallelism: level k of each cp group ----------------------------------


def _level(name: str) -> str:
    return f"l{name.rsplit('-', 1)[1]}"


def _hcp_size(topo: KindSource, name: str) -> int:
    return (topo.hcp_sizes or ())[int(name.rsplit("-", 1)[1])]


def _hcp_groups(topo: KindSource, name: str) -> DerivedGroups:
    cp_groups = topo.dense.groups("cp")
    levels = level_grid(topo.hcp_sizes or ()).groups(_level(name))
    per = len(levels)
    return DerivedGroups(
        len(cp_groups) * per,
        lambda i: cp_groups.ranks(i // per).take(levels.ranks(i % per).compact()),
    )


def _hcp_locate(topo: KindSource, name: str, rank: int) -> tuple[int, int]:
    level = _level(name)
    levels = level_grid(topo.hcp_sizes or ())
    cp_index, position = grid_locate(topo.dense, ("cp",), rank)
    inner = levels.groups(level).index_of_rank(position) or 0
    return cp_index * len(levels.groups(level)) + inner, levels.index_in_group(position, level)


def _hcp_shape(topo: KindSource, name: str) -> Shape:
    (cp_digit,), rest = topo.dense.digits("cp")
    inner, outer = level_grid(topo.hcp_sizes or ()).digits(_level(name))
    stride = cp_digit[1]
    return Shape.regular(
        [(size, step * stride) for size, step in inner],
        [*rest, *((size, step * stride) for size, step in outer)],
        topo.rank_offset,
    )


HCP_LEVEL = Derived(_hcp_size, _hcp_groups, _hcp_locate, shape=_hcp_shape)
"""Level k of hierarchical cp: each cp group split by the level grid of ``hcp_sizes``."""


# -- distributed-optimizer instances: dp-cp and edp split into instances -------------------------


def _intra_dp_cp_size(topo: KindSource, name: str) -> int:
    return topo.dense.size("dp", "cp") // topo.dist_opt_instances


def _intra_dp_cp_groups(topo: KindSource, name: str) -> DerivedGroups:
    instances = topo.dist_opt_instances
    dp_cp = topo.dense.groups("dp", "cp")
    width = dp_cp.group_size // instances
    return DerivedGroups(
        len(dp_cp) * instances,
        lambda i: dp_cp.ranks(i // instances).take(_chunk(i % instances, width)),
    )


def _intra_dp_cp_locate(topo: KindSource, name: str, rank: int) -> tuple[int, int]:
    instances = topo.dist_opt_instances
    group, position = grid_locate(topo.dense, ("dp", "cp"), rank)
    width = topo.dense.size("dp", "cp") // instances
    return group * instances + position // width, position % width


def _instance_digits(
    topo: KindSource, grid: Grid, axes: tuple[str, ...]
) -> tuple[Sequence[tuple[int, int]], Sequence[tuple[int, int]], Sequence[tuple[int, int]]] | None:
    """``(low, high, others)``: the digits of ``axes`` cut at one instance's share, and the rest.

    None when the share cuts a digit unevenly (then the groups are no translate family).
    """
    digits, others = grid.digits(*axes)
    cut = split(normal(digits), grid.size(*axes) // topo.dist_opt_instances)
    if cut is None:
        return None
    low, high = cut
    return low, high, others


def _split_shape(
    topo: KindSource, grid: Grid, axes: tuple[str, ...], *, replicas: bool
) -> Shape | None:
    """The shape of each instance's share of the groups along ``axes`` or, with ``replicas``,
    of one position across the shares; None when the split is no set of digits."""
    found = _instance_digits(topo, grid, axes)
    if found is None:
        return None
    low, high, others = found
    inner, outer = (high, low) if replicas else (low, high)
    return Shape.regular(inner, (*outer, *others), topo.rank_offset)


def _intra_dp_cp_shape(topo: KindSource, name: str) -> Shape | None:
    return _split_shape(topo, topo.dense, ("dp", "cp"), replicas=False)


INTRA_DP_CP = Derived(
    _intra_dp_cp_size,
    _intra_dp_cp_groups,
    _intra_dp_cp_locate,
    shape=_intra_dp_cp_shape,
    per_parent=_instances,
)
"""One instance's share of each dp-cp group: consecutive blocks of ``dp * cp / instances``."""


# -- replicate x shard: the data-parallel ranks split at the instance boundary ------------------


def splits_dp(topo: KindSource) -> bool:
    """True when the instances cut the dp axis itself: ``instances`` divides dp and cp (if any)
    varies faster than dp, so one instance's share of a dp-cp group is a block of dp
    coordinates times every cp coordinate (torchtitan's ``dp_shard x cp``)."""
    instances = topo.dist_opt_instances
    grid = topo.dense
    dp = grid.size("dp")
    if instances == 1 or dp % instances:
        return False
    if grid.size("cp") == 1:
        return True
    strides = dict(zip(grid.axes, grid.strides, strict=True))
    return strides["cp"] < strides["dp"]


def _across_shares(groups: OrthogonalGroups, size: int, width: int) -> DerivedGroups:
    """Position ``j`` of every ``width``-wide share of each group: ``j, j + width, ...``."""
    return DerivedGroups(
        len(groups) * width,
        lambda i: groups.ranks(i // width).take(range(i % width, size, width)),
    )


def _dp_replicate_groups(topo: KindSource, name: str) -> DerivedGroups:
    dp_cp = topo.dense.groups("dp", "cp")
    size = dp_cp.group_size
    return _across_shares(dp_cp, size, size // topo.dist_opt_instances)


def _dp_replicate_locate(topo: KindSource, name: str, rank: int) -> tuple[int, int]:
    group, position = grid_locate(topo.dense, ("dp", "cp"), rank)
    width = topo.dense.size("dp", "cp") // topo.dist_opt_instances
    return group * width + position % width, position // width


def _dp_replicate_shape(topo: KindSource, name: str) -> Shape | None:
    return _split_shape(topo, topo.dense, ("dp", "cp"), replicas=True)


DP_REPLICATE = Derived(
    lambda topo, name: topo.dist_opt_instances,
    _dp_replicate_groups,
    _dp_replicate_locate,
    shape=_dp_replicate_shape,
    per_parent=lambda topo: topo.dense.size("dp", "cp") // topo.dist_opt_instances,
)
"""The same position in every instance's share of a dp-cp group: the replicas of one shard
(torchtitan's ``dp_replicate``; HSDP all-reduces gradients over it)."""


def _dp_shard_groups(topo: KindSource, name: str) -> DerivedGroups:
    instances = topo.dist_opt_instances
    dp = topo.dense.groups("dp")
    width = dp.group_size // instances
    return DerivedGroups(
        len(dp) * instances,
        lambda i: dp.ranks(i // instances).take(_chunk(i % instances, width)),
    )


def _dp_shard_locate(topo: KindSource, name: str, rank: int) -> tuple[int, int]:
    instances = topo.dist_opt_instances
    group, position = grid_locate(topo.dense, ("dp",), rank)
    width = topo.dense.size("dp") // instances
    return group * instances + position // width, position % width


def _dp_shard_shape(topo: KindSource, name: str) -> Shape | None:
    return _split_shape(topo, topo.dense, ("dp",), replicas=False)


DP_SHARD = Derived(
    lambda topo, name: topo.dense.size("dp") // topo.dist_opt_instances,
    _dp_shard_groups,
    _dp_shard_locate,
    shape=_dp_shard_shape,
    per_parent=_instances,
)
"""One instance's share of each dp group, without cp (torchtitan's ``dp_shard``)."""


def _edp(topo: KindSource, rank: int) -> tuple[int, int, int]:
    """``(edp group index, position in it, width of one instance's share)``."""
    grid, axes = _place(topo, "edp")
    group, position = grid_locate(grid, axes, rank)
    return group, position, topo.edp // topo.dist_opt_instances


def _edp_groups(topo: KindSource) -> OrthogonalGroups:
    grid, axes = _place(topo, "edp")
    return grid.groups(*axes)


def _intra_edp_groups(topo: KindSource, name: str) -> DerivedGroups:
    instances = topo.dist_opt_instances
    edp_groups = _edp_groups(topo)
    width = topo.edp // instances
    return DerivedGroups(
        len(edp_groups) * instances,
        lambda i: edp_groups.ranks(i // instances).take(_chunk(i % instances, width)),
    )


def _intra_edp_locate(topo: KindSource, name: str, rank: int) -> tuple[int, int]:
    group, position, width = _edp(topo, rank)
    return group * topo.dist_opt_instances + position // width, position % width


def _intra_edp_shape(topo: KindSource, name: str) -> Shape | None:
    return _split_shape(topo, *_place(topo, "edp"), replicas=False)


def _inter_edp_shape(topo: KindSource, name: str) -> Shape | None:
    return _split_shape(topo, *_place(topo, "edp"), replicas=True)


def _intra_dist_opt_shape(topo: KindSource, name: str) -> Shape | None:
    """One instance: a block of edp positions, times every other axis of the expert grid."""
    found = _instance_digits(topo, *_place(topo, "edp"))
    if found is None:
        return None
    low, high, others = found
    return Shape.regular((*low, *others), high, topo.rank_offset)  # one block of edp positions


INTRA_EDP = Derived(
    lambda topo, name: topo.edp // topo.dist_opt_instances,
    _intra_edp_groups,
    _intra_edp_locate,
    shape=_intra_edp_shape,
    per_parent=_instances,
)
"""One instance's share of each edp group (Megatron's ``intra_expt_dp``)."""


def _inter_edp_groups(topo: KindSource, name: str) -> DerivedGroups:
    edp = topo.edp
    return _across_shares(_edp_groups(topo), edp, edp // topo.dist_opt_instances)


def _inter_edp_locate(topo: KindSource, name: str, rank: int) -> tuple[int, int]:
    group, position, width = _edp(topo, rank)
    return group * width + position % width, position // width


INTER_EDP = Derived(
    lambda topo, name: topo.dist_opt_instances,
    _inter_edp_groups,
    _inter_edp_locate,
    shape=_inter_edp_shape,
    per_parent=lambda topo: topo.edp // topo.dist_opt_instances,
)
"""The same position across the instances of each edp group (Megatron's ``inter_dist_opt``)."""


def _intra_dist_opt_groups(topo: KindSource, name: str) -> DerivedGroups:
    # Consecutive blocks of `width` etp-ep-pp groups: the ranks whose edp coordinate lies in
    # one block.
    grid, axes = _place(topo, "etp-ep-pp")
    model_groups = grid.groups(*axes)
    width = topo.edp // topo.dist_opt_instances
    return DerivedGroups(topo.dist_opt_instances, lambda i: _union_block(model_groups, i, width))


def _intra_dist_opt_locate(topo: KindSource, name: str, rank: int) -> tuple[int, int]:
    _, position, width = _edp(topo, rank)
    index = position // width
    return index, _intra_dist_opt_groups(topo, name).ranks(index).index(rank)


def _union_block(model_groups: OrthogonalGroups, index: int, width: int) -> Sequence[int]:
    """The union of model groups ``index * width .. (index + 1) * width - 1``, ascending.

    When the block of group indices is one aligned piece of the groups' outer runs, the union
    is those runs plus the groups' own runs (both are digits of one grid); otherwise (an
    uneven block of a dense-only layout) it is enumerated.
    """
    offset, inner, outer = model_groups.structure
    pieces = Ranks(0, outer).take(_chunk(index, width)).blocks()
    if pieces is not None and len(pieces) == 1:
        first, block = pieces[0]
        return Ranks(offset + first, normal((*inner, *block)))
    members = range(index * width, (index + 1) * width)
    return tuple(sorted(r for g in members for r in model_groups[g]))


INTRA_DIST_OPT = Derived(
    lambda topo, name: topo.world_size // topo.dist_opt_instances,
    _intra_dist_opt_groups,
    _intra_dist_opt_locate,
    shape=_intra_dist_opt_shape,
    per_parent=_instances,
)
"""One distributed-optimizer instance: every rank whose edp coordinate lies in its block."""
