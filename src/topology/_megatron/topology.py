"""Topology: Megatron's parallel layout (dense and expert grids), validated and queryable."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .._args import show
from .._errors import TopologyError
from .._layout.grid import Grid
from .._layout.groups import DerivedGroups, OrthogonalGroups, Positions, Ranks, compress
from .._layout.hierarchy import level_grid
from .kinds import DENSE_KINDS, EXPERT_KINDS, MEGATRON_NAMES, Kind, canonical_kind
from .pipeline import Pipeline, virtual_layers
from .rank_info import RankInfo
from .validate import validate_topology

__all__ = ["GroupList", "Topology"]

_DENSE_MEANING = {
    "ep": (),
    "etp": ("tp",),
    "etp-ep": ("tp",),
    "etp-ep-pp": ("tp", "pp"),
    "edp": ("dp", "cp"),
}
"""What the expert kinds mean in a dense-only layout that has no expert grid of its own."""

GroupList = OrthogonalGroups | DerivedGroups
"""A lazy, immutable sequence of groups (each a tuple of ints)."""


def _tuple_or_none(value: object) -> object:
    if value is None or isinstance(value, (str, bytes)):
        return value
    if isinstance(value, Sequence):
        return tuple(value)
    return value


def _stage_tuple(value: object) -> object:
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return tuple(value)
    return value


@attrs.frozen(repr=False)
class Topology:
    """Which global ranks form which parallel group, with Megatron-core's semantics.

    Two grids lie over the same ranks (MoE parallel folding): ``dense`` over (tp, cp, dp, pp) and
    ``expert`` over (etp, ep, edp, pp), both laid out by ``order`` (innermost axis first). Derived
    sizes: ``dp = W / (tp * cp * pp)``, ``etp = etp or tp``, ``edp = W / (etp * ep * pp)``.

    Args:
        world_size: how many ranks.
        tp, pp, cp, ep: tensor, pipeline, context and expert parallel sizes.
        etp: expert tensor-parallel size (default: tp).
        dp: data-parallel size; derived, and checked if given.
        vpp: virtual pipeline chunks per stage (needs pp > 1).
        order: Megatron's order string, innermost first; missing size-1 axes go last.
        rank_offset: the first rank of the layout.
        dist_opt_instances: distributed-optimizer instances (Megatron's
            ``num_distributed_optimizer_instances``).
        hcp_sizes: hierarchical context-parallel level sizes (product = cp).
        embedding_stages: the pipeline stages holding word embeddings (default first and last).
        position_embedding_stages: the stages holding position embeddings (default first).

    Raises:
        TopologyError: for any layout Megatron would reject, or accept and get wrong.

    >>> topo = Topology(16, tp=2, pp=4)
    >>> str(topo)
    'tp2·cp1·ep1·dp2·pp4 (tp fastest)'
    >>> list(topo.groups("dp"))[:4]
    [(0, 2), (1, 3), (4, 6), (5, 7)]
    >>> topo.group_of(9, "pp"), topo.group_of(12, "embedding")
    ((1, 5, 9, 13), (0, 12))
    """

    world_size: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    dp: int | None = None
    vpp: int | None = None
    order: str = "tp-cp-ep-dp-pp"
    rank_offset: int = 0
    dist_opt_instances: int = 1
    hcp_sizes: tuple[int, ...] | None = attrs.field(default=None, converter=_tuple_or_none)
    embedding_stages: tuple[int, ...] = attrs.field(default=(0, -1), converter=_stage_tuple)
    position_embedding_stages: tuple[int, ...] = attrs.field(default=(0,), converter=_stage_tuple)
    _dense: Grid = attrs.field(init=False, eq=False, repr=False)
    _expert: Grid | None = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        facts = validate_topology(self)
        for name, value in facts.items():
            object.__setattr__(self, name, value)

    # -- named constructors -------------------------------------------------------------------

    @classmethod
    def megatron(cls, world_size: int, **kwargs: Any) -> Topology:
        """Megatron-core's convention (order ``tp-cp-ep-dp-pp``); the same as ``Topology(...)``."""
        return cls(world_size, **kwargs)

    @classmethod
    def ml_starter(
        cls, world_size: int, model_parallelism: int = 1, pipeline_parallelism: int = 1
    ) -> Topology:
        """ml-starter's ``init_parallelism`` layout: order ``tp-pp-dp``, model parallelism is tp.

        >>> list(Topology.ml_starter(8, 2, 2).groups("dp"))
        [(0, 4), (1, 5), (2, 6), (3, 7)]
        """
        return cls(world_size, tp=model_parallelism, pp=pipeline_parallelism, order="tp-pp-dp")

    @classmethod
    def ezpz(cls, world_size: int, tp: int = 1, pp: int = 1, cp: int = 1) -> Topology:
        """ezpz / fairscale's ``initialize_tensor_parallel`` layout: order ``tp-cp-pp-dp``.

        >>> list(Topology.ezpz(16, tp=2, pp=2, cp=2).groups("pp"))[:2]
        [(0, 4), (1, 5)]
        """
        return cls(world_size, tp=tp, pp=pp, cp=cp, order="tp-cp-pp-dp")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Topology:
        """The inverse of :meth:`to_dict`; unknown or missing keys raise ``TopologyError``.

        >>> Topology.from_dict(Topology(8, tp=2).to_dict()) == Topology(8, tp=2)
        True
        """
        if not isinstance(data, Mapping):
            raise TopologyError(
                f"a topology must be a mapping of fields, got {type(data).__name__}"
            )
        fields = [f.name for f in attrs.fields(cls) if f.init]
        unknown = sorted(show(key) for key in data if key not in fields)
        if unknown:
            raise TopologyError(
                f"unknown topology field {unknown[0]}; valid fields: {', '.join(fields)}"
            )
        if "world_size" not in data:
            raise TopologyError("a topology needs 'world_size', e.g. {\"world_size\": 8}")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON-safe values (ints, strings, lists, None)."""
        return {
            "world_size": self.world_size,
            "tp": self.tp,
            "pp": self.pp,
            "cp": self.cp,
            "ep": self.ep,
            "etp": self.etp,
            "dp": self.dp,
            "vpp": self.vpp,
            "order": self.order,
            "rank_offset": self.rank_offset,
            "dist_opt_instances": self.dist_opt_instances,
            "hcp_sizes": None if self.hcp_sizes is None else list(self.hcp_sizes),
            "embedding_stages": list(self.embedding_stages),
            "position_embedding_stages": list(self.position_embedding_stages),
        }

    # -- grids and sizes ----------------------------------------------------------------------

    @property
    def dense(self) -> Grid:
        """The grid of attention / dense layers: axes tp, cp, dp, pp."""
        return self._dense

    @property
    def expert(self) -> Grid | None:
        """The grid of expert (MoE) layers: axes etp, ep, edp, pp.

        None for a dense-only layout (ep = 1, etp = tp) whose order puts pp inside dp while
        cp > 1 (ezpz's ``tp-cp-pp-dp``): there no expert grid can share the dense pipeline, so
        the expert kinds mean what they mean for dense layers (etp = tp, edp = dp-cp, ep alone).
        """
        return self._expert

    @property
    def edp(self) -> int:
        """Expert data-parallel size, ``W / (etp * ep * pp)``."""
        return (
            self.world_size
            // (self._dense.size("tp") if self.etp is None else self.etp)
            // (self.ep * self.pp)
        )

    @property
    def kinds(self) -> tuple[str, ...]:
        """Every group kind this topology defines, in Megatron's creation order."""
        instances = self.dist_opt_instances > 1
        levels = tuple(f"hcp-{k}" for k in range(len(self.hcp_sizes or ())))
        return (
            "dp-cp",
            *(("intra-dp-cp",) if instances else ()),
            "dp",
            "cp",
            *levels,
            "tp-pp",
            "tp",
            "pp",
            "embedding",
            "position-embedding",
            "tp-dp-cp",
            "tp-dp",
            "tp-cp",
            "ep",
            "etp",
            "etp-ep",
            "etp-ep-pp",
            "edp",
            *(("intra-edp", "inter-edp", "intra-dist-opt") if instances else ()),
        )

    def kind(self, name: str) -> Kind:
        """The kind called ``name`` (ours or Megatron's) in this topology.

        Raises:
            TopologyError: for a name that is no kind of this topology.

        >>> Topology(16, tp=2, pp=4).kind("mp").axes
        ('tp', 'pp')
        """
        canonical = self._kind(name)
        grid: Grid | None = None
        axes: tuple[str, ...] = ()
        if canonical in DENSE_KINDS or canonical in EXPERT_KINDS:
            grid, axes = self._grid_kind(canonical)
        megatron = tuple(short for short, ours in MEGATRON_NAMES.items() if ours == canonical)
        return Kind(canonical, megatron, grid, axes)

    def size(self, kind: str) -> int:
        """How many ranks one group of ``kind`` holds, in O(1).

        >>> topo = Topology(16, tp=2, pp=4)
        >>> topo.size("tp-dp"), topo.size("embedding")
        (4, 2)
        """
        kind = self._kind(kind)
        if kind in DENSE_KINDS or kind in EXPERT_KINDS:
            grid, axes = self._grid_kind(kind)
            return grid.size(*axes)
        instances = self.dist_opt_instances
        sizes = {
            "embedding": len(self.embedding_stages),
            "position-embedding": len(self.position_embedding_stages),
            "intra-dp-cp": self._dense.size("dp", "cp") // instances,
            "intra-edp": self.edp // instances,
            "inter-edp": instances,
            "intra-dist-opt": self.world_size // instances,
        }
        if kind in sizes:
            return sizes[kind]
        return (self.hcp_sizes or ())[int(kind[4:])]

    # -- groups -------------------------------------------------------------------------------

    def groups(self, kind: str) -> GroupList:
        """All groups of ``kind``, lazily, in Megatron's order.

        >>> list(Topology(8, tp=2, pp=2).groups("tp-pp"))
        [(0, 1, 4, 5), (2, 3, 6, 7)]
        """
        kind = self._kind(kind)
        if kind in DENSE_KINDS or kind in EXPERT_KINDS:
            grid, axes = self._grid_kind(kind)
            return grid.groups(*axes)
        return self._derived_groups(kind)

    def group_of(self, rank: int, kind: str) -> tuple[int, ...]:
        """The group of ``kind`` that holds ``rank``.

        Raises:
            TopologyError: for an unknown kind, a rank outside the layout, or a rank that belongs
                to no group of that kind (a middle pipeline stage has no ``embedding`` group).

        >>> Topology(16, tp=2, pp=4).group_of(5, "embedding")
        Traceback (most recent call last):
        topology._errors.TopologyError: rank 5 belongs to no embedding group:
        it is pipeline stage 1 of 4 and embedding lives on stages 0, 3
        """
        kind = self._kind(kind)
        self._dense._check_rank(rank)
        if kind in DENSE_KINDS or kind in EXPERT_KINDS:
            grid, axes = self._grid_kind(kind)
            return grid.group_of(rank, *axes)
        return self._derived_group_of(rank, kind)

    def local_rank(self, rank: int, kind: str) -> int:
        """The rank's position in its group of ``kind``, without building the group.

        >>> Topology(16, tp=2, pp=4).local_rank(9, "pp")
        2
        """
        return self.locate(rank, kind)[1]

    def group_index(self, rank: int, kind: str) -> int:
        """Which group of ``kind`` holds the rank: ``groups(kind)[group_index(r, kind)]`` has it.

        >>> topo = Topology(16, tp=2, pp=4)
        >>> topo.group_index(9, "dp"), topo.groups("dp")[topo.group_index(9, "dp")]
        (5, (9, 11))
        """
        return self.locate(rank, kind)[0]

    def locate(self, rank: int, kind: str) -> tuple[int, int]:
        """``(group index, local rank)`` of ``rank`` for ``kind`` in O(number of axes).

        Raises:
            TopologyError: as :meth:`group_of` does.

        >>> Topology(16, tp=2, pp=4).locate(13, "embedding")
        (1, 1)
        """
        kind = self._kind(kind)
        self._dense._check_rank(rank)
        if kind in DENSE_KINDS or kind in EXPERT_KINDS:
            return _grid_locate(*self._grid_kind(kind), rank)
        if kind in ("embedding", "position-embedding"):
            self._check_embedding_member(rank, kind)
            pipeline_index = self._dense.groups("pp").index_of_rank(rank)
            return pipeline_index or 0, self._stages(kind).index(self.stage(rank))
        instances = self.dist_opt_instances
        if kind.startswith("hcp-"):
            level = f"l{kind[4:]}"
            levels = level_grid(self.hcp_sizes or ())
            cp_index, position = _grid_locate(self._dense, ("cp",), rank)
            inner = levels.groups(level).index_of_rank(position) or 0
            return cp_index * len(levels.groups(level)) + inner, levels.index_in_group(
                position, level
            )
        if kind == "intra-dp-cp":
            group, position = _grid_locate(self._dense, ("dp", "cp"), rank)
            width = self._dense.size("dp", "cp") // instances
            return group * instances + position // width, position % width
        group, position = _grid_locate(*self._grid_kind("edp"), rank)
        width = self.edp // instances
        if kind == "intra-edp":
            return group * instances + position // width, position % width
        if kind == "inter-edp":
            return group * width + position % width, position // width
        index = position // width
        return index, self._derived_groups(kind).ranks(index).index(rank)

    def has_group(self, rank: int, kind: str) -> bool:
        """True if ``rank`` belongs to some group of ``kind`` (only embeddings can say no)."""
        kind = self._kind(kind)
        self._dense._check_rank(rank)
        if kind == "embedding":
            return self.stage(rank) in self.embedding_stages
        if kind == "position-embedding":
            return self.stage(rank) in self.position_embedding_stages
        return True

    # -- pipeline -----------------------------------------------------------------------------

    def stage(self, rank: int) -> int:
        """The rank's pipeline stage (its pp coordinate)."""
        return self._dense.index_in_group(rank, "pp")

    def pipeline(self, rank: int) -> Pipeline:
        """The rank's pipeline: stage, neighbours (wrap-around), embedding membership."""
        stage = self.stage(rank)
        return Pipeline(
            rank=rank,
            stage=stage,
            ranks=self._ranks_of(rank, "pp"),
            in_embedding=stage in self.embedding_stages,
            in_position_embedding=stage in self.position_embedding_stages,
        )

    def layers(self, stage: int, num_layers: int) -> tuple[tuple[int, ...], ...]:
        """The 0-based layers each virtual chunk of ``stage`` holds (one chunk without vpp).

        >>> Topology(4, pp=4, vpp=2).layers(0, 16)
        ((0, 1), (8, 9))
        """
        return virtual_layers(stage, num_layers, self.pp, self.vpp)

    def is_first_stage(self, rank: int, vp_stage: int | None = None) -> bool:
        """First stage; with ``vp_stage`` (and vpp set) also the first virtual chunk."""
        if vp_stage is not None and self.vpp is not None and self._vp(vp_stage) != 0:
            return False
        return self.stage(rank) == 0

    def is_last_stage(self, rank: int, vp_stage: int | None = None) -> bool:
        """Last stage; with ``vp_stage`` (and vpp set) also the last virtual chunk."""
        if vp_stage is not None and self.vpp is not None and self._vp(vp_stage) != self.vpp - 1:
            return False
        return self.stage(rank) == self.pp - 1

    def in_embedding(self, rank: int, vp_stage: int | None = None) -> bool:
        """True if the rank holds word embeddings (in virtual chunk ``vp_stage``, if given).

        With virtual stages only the first chunk of the first stage and the last chunk of the
        last stage hold them, as in Megatron's ``is_rank_in_embedding_group``.
        """
        stage = self.stage(rank)
        if stage not in self.embedding_stages:
            return False
        if vp_stage is None or self.vpp is None:
            return True
        if stage == 0 and self.pp > 1:
            return self.is_first_stage(rank, vp_stage)
        if stage == self.pp - 1:
            return self.is_last_stage(rank, vp_stage)
        return True

    def rank_info(self, rank: int) -> RankInfo:
        """Everything about one rank: coordinates, every kind's group and position, pipeline.

        Groups are lazy :class:`Ranks`, so this costs O(kinds * axes) at any world size.
        """
        self._dense._check_rank(rank)
        groups: dict[str, Ranks | None] = {}
        for kind in self.kinds:
            groups[kind] = self._ranks_of(rank, kind) if self.has_group(rank, kind) else None
        return RankInfo(
            rank=rank,
            dense=tuple(self._dense.coord(rank).items()),
            expert=() if self._expert is None else tuple(self._expert.coord(rank).items()),
            groups=tuple(groups.items()),
            pipeline=self.pipeline(rank),
        )

    # -- derived kinds ------------------------------------------------------------------------

    def _grid_kind(self, kind: str) -> tuple[Grid, tuple[str, ...]]:
        if kind in DENSE_KINDS:
            return self._dense, DENSE_KINDS[kind]
        if self._expert is None:
            return self._dense, _DENSE_MEANING[kind]
        return self._expert, EXPERT_KINDS[kind]

    def _kind(self, kind: object) -> str:
        if not isinstance(kind, str):
            raise TopologyError(f"kind must be a string like 'tp', got {show(kind)}")
        name = canonical_kind(kind)
        if name not in self.kinds:
            raise TopologyError(f"unknown kind {show(kind)}; valid kinds: {', '.join(self.kinds)}")
        return name

    def _vp(self, vp_stage: object) -> int:
        vpp = self.vpp or 1
        if type(vp_stage) is not int or not 0 <= vp_stage < vpp:
            raise TopologyError(
                f"vp_stage {show(vp_stage)} is out of range; valid: 0 to {vpp - 1} (vpp={vpp})"
            )
        return vp_stage

    def _derived_groups(self, kind: str) -> DerivedGroups:
        """The groups of a kind that is no plain set of axes, each built as a lazy Ranks."""
        if kind in ("embedding", "position-embedding"):
            stages = self._stages(kind)
            pp_groups = self._dense.groups("pp")
            return DerivedGroups(len(pp_groups), lambda i: pp_groups.ranks(i).take(stages))
        if kind.startswith("hcp-"):
            level = int(kind[4:])
            cp_groups = self._dense.groups("cp")
            levels = level_grid(self.hcp_sizes or ()).groups(f"l{level}")
            per = len(levels)
            return DerivedGroups(
                len(cp_groups) * per,
                lambda i: cp_groups.ranks(i // per).take(_positions(levels.ranks(i % per))),
            )
        instances = self.dist_opt_instances
        if kind == "intra-dp-cp":
            dp_cp = self._dense.groups("dp", "cp")
            width = dp_cp.group_size // instances
            return DerivedGroups(
                len(dp_cp) * instances,
                lambda i: dp_cp.ranks(i // instances).take(_chunk(i % instances, width)),
            )
        edp_groups = self.groups("edp")
        width = self.edp // instances
        if kind == "intra-edp":
            return DerivedGroups(
                len(edp_groups) * instances,
                lambda i: edp_groups.ranks(i // instances).take(_chunk(i % instances, width)),
            )
        if kind == "inter-edp":
            edp = self.edp
            return DerivedGroups(
                len(edp_groups) * width,
                lambda i: edp_groups.ranks(i // width).take(range(i % width, edp, width)),
            )
        # intra-dist-opt: consecutive blocks of `width` etp-ep-pp groups, i.e. the ranks whose
        # edp coordinate lies in one block.
        model_groups = self.groups("etp-ep-pp")
        assert isinstance(model_groups, OrthogonalGroups)  # a grid kind
        return DerivedGroups(instances, lambda i: _union_block(model_groups, i, width))

    def _derived_group_of(self, rank: int, kind: str) -> tuple[int, ...]:
        return self._derived_groups(kind)[self.locate(rank, kind)[0]]

    def _ranks_of(self, rank: int, kind: str) -> Ranks:
        """``group_of(rank, kind)`` as a lazy :class:`Ranks`, in O(number of axes)."""
        kind = self._kind(kind)
        self._dense._check_rank(rank)
        if kind in DENSE_KINDS or kind in EXPERT_KINDS:
            grid, axes = self._grid_kind(kind)
            found = grid.groups(*axes).ranks_of(rank)
            assert found is not None  # the rank was checked above
            return found
        return self._derived_groups(kind).ranks(self.locate(rank, kind)[0])

    def _check_embedding_member(self, rank: int, kind: str) -> tuple[int, ...]:
        stages = self._stages(kind)
        stage = self.stage(rank)
        if stage not in stages:
            where = ", ".join(map(str, stages))
            raise TopologyError(
                f"rank {rank} belongs to no {kind} group: it is pipeline stage {stage} of "
                f"{self.pp} and {kind} lives on stages {where}"
            )
        return stages

    def _stages(self, kind: str) -> tuple[int, ...]:
        if kind == "embedding":
            return self.embedding_stages
        return self.position_embedding_stages

    # -- text ---------------------------------------------------------------------------------

    def __str__(self) -> str:
        tokens = self.order.split("-")
        sizes = {"tp": self.tp, "cp": self.cp, "ep": self.ep, "dp": self.dp, "pp": self.pp}
        text = "·".join(f"{t}{sizes[t]}" for t in tokens)
        extras = []
        if self.etp != self.tp:
            extras.append(f"etp{self.etp}")
        if self.vpp is not None:
            extras.append(f"vpp{self.vpp}")
        if self.rank_offset:
            extras.append(f"from rank {self.rank_offset}")
        tail = (", " + ", ".join(extras)) if extras else ""
        return f"{text} ({tokens[0]} fastest{tail})"

    def __repr__(self) -> str:
        parts = [str(self.world_size)]
        for name in ("tp", "pp", "cp", "ep"):
            if getattr(self, name) != 1:
                parts.append(f"{name}={getattr(self, name)}")
        if self.etp != self.tp:
            parts.append(f"etp={self.etp}")
        optional = {
            "vpp": (self.vpp, None),
            "order": (self.order, "tp-cp-ep-dp-pp"),
            "rank_offset": (self.rank_offset, 0),
            "dist_opt_instances": (self.dist_opt_instances, 1),
            "hcp_sizes": (self.hcp_sizes, None),
            "embedding_stages": (self.embedding_stages, tuple(sorted({0, self.pp - 1}))),
            "position_embedding_stages": (self.position_embedding_stages, (0,)),
        }
        parts += [
            f"{name}={_short(value) if isinstance(value, tuple) else repr(value)}"
            for name, (value, default) in optional.items()
            if value != default
        ]
        return f"Topology({', '.join(parts)})"


def _grid_locate(grid: Grid, axes: tuple[str, ...], rank: int) -> tuple[int, int]:
    index = grid.groups(*axes).index_of_rank(rank)
    return index or 0, grid.index_in_group(rank, *axes)


def _chunk(index: int, width: int) -> range:
    return range(index * width, (index + 1) * width)


def _positions(group: Ranks) -> Positions:
    """A group of positions as a range when it is one run, else as a tuple."""
    whole = group.runs
    if whole is not None and len(whole[1]) <= 1:
        first, runs = whole
        size, stride = runs[0] if runs else (1, 1)
        return range(first, first + size * stride, stride)
    return tuple(group)


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
        runs = sorted((*inner, *block), key=lambda run: run[1])
        return Ranks(offset + first, compress([s for s, _ in runs], [d for _, d in runs]))
    members = range(index * width, (index + 1) * width)
    return tuple(sorted(r for g in members for r in model_groups[g]))


def _short(values: tuple[int, ...]) -> str:
    """``repr(values)``, or its ends and length when it is long."""
    if len(values) <= 16:
        return repr(values)
    return f"<{len(values)} items: {values[0]}, {values[1]}, {values[2]}, …, {values[-1]}>"
