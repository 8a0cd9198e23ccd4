"""Topology: Megatron's parallel layout (dense and expert grids), validated and queryable."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .._args import show
from .._errors import TopologyError
from .._layout.grid import Grid, check_rank
from .._layout.groups import GroupList, Ranks
from .kinds import Kind, KindSpec, canonical_kind, kinds_of, spec_of
from .pipeline import Pipeline, virtual_layers
from .rank_info import RankInfo
from .split.split import PipelineSplit, check_split
from .validate import Resolved, validate_topology

__all__ = ["GroupList", "Topology"]


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
    sizes: ``dp = W / (tp * cp * pp * gtp)``, ``etp = etp or tp``,
    ``edp = W / (etp * ep * pp * egtp)``. Megatron's GTP axes (generalized tensor parallelism
    with weight rematerialization) are grid axes when larger than 1: ``gtp`` on the dense grid
    (placed right after tp unless the order names it), ``egtp`` on the expert grid (right after
    ep); dp and edp are then the replicate degrees.
    The fields keep what was given (``attrs.evolve`` changes one and derives the rest again);
    ``dp``, ``etp``, ``order`` and the stages read back resolved, and equality compares those.
    Every kind is a row of the kind table (``kinds.py``); the kind methods look it up.

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
        gtp: Megatron's ``gtp_remat_size``, the dense GTP axis (weights sharded and gathered).
        egtp: Megatron's ``expert_gtp_remat_size``, the expert GTP axis.

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
    _etp: int | None = attrs.field(default=None, alias="etp", eq=False)
    _dp: int | None = attrs.field(default=None, alias="dp", eq=False)
    vpp: int | None = None
    _order: str = attrs.field(default="tp-cp-ep-dp-pp", alias="order", eq=False)
    rank_offset: int = 0
    dist_opt_instances: int = 1
    hcp_sizes: tuple[int, ...] | None = attrs.field(default=None, converter=_tuple_or_none)
    _embedding_stages: tuple[int, ...] = attrs.field(
        default=(0, -1), converter=_stage_tuple, alias="embedding_stages", eq=False
    )
    _position_embedding_stages: tuple[int, ...] = attrs.field(
        default=(0,), converter=_stage_tuple, alias="position_embedding_stages", eq=False
    )
    gtp: int = 1
    egtp: int = 1
    # Derived from the fields above. Equality compares the resolved etp, dp, order and stages
    # (in `_resolved`), not the given ones: Topology(8, tp=2) == Topology(8, tp=2, dp=4).
    _resolved: Resolved = attrs.field(init=False, repr=False)
    _kinds: tuple[str, ...] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_resolved", validate_topology(**self._given()))
        object.__setattr__(self, "_kinds", kinds_of(self))

    def _given(self) -> dict[str, Any]:
        """The constructor's keywords and the values given for them."""
        return {f.alias: getattr(self, f.name) for f in attrs.fields(type(self)) if f.init}

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
        fields = [f.alias for f in attrs.fields(cls) if f.init]
        unknown = sorted(show(key) for key in data if key not in fields)
        if unknown:
            raise TopologyError(
                f"unknown topology field {unknown[0]}; valid fields: {', '.join(fields)}"
            )
        if "world_size" not in data:
            raise TopologyError("a topology needs 'world_size', e.g. {\"world_size\": 8}")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        """Every field as given, as JSON-safe values; the order is written out in full.

        ``dp``, ``etp`` and the stages stay as given (None, ``[0, -1]``), so the dict describes
        the same layout when one field is changed: ``attrs.evolve(t, pp=2)`` equals
        ``Topology(**{**t.to_dict(), "pp": 2})`` whenever the former is valid.

        >>> Topology(16, tp=2, pp=4).to_dict()["dp"], Topology(16, tp=2, pp=4).dp
        (None, 2)
        """
        data = self._given()
        data["order"] = self.order
        for name in ("hcp_sizes", "embedding_stages", "position_embedding_stages"):
            data[name] = None if data[name] is None else list(data[name])
        return data

    # -- the values derived from the fields -----------------------------------------------------

    @property
    def dp(self) -> int:
        """Data-parallel (replicate) size, ``W / (tp * cp * pp * gtp)``."""
        return self._resolved.dp

    @property
    def etp(self) -> int:
        """Expert tensor-parallel size (tp unless given)."""
        return self._resolved.etp

    @property
    def order(self) -> str:
        """The order, innermost axis first, with every axis named (missing ones appended)."""
        return self._resolved.order

    @property
    def embedding_stages(self) -> tuple[int, ...]:
        """The stages holding word embeddings, ascending, without negative indices."""
        return self._resolved.embedding_stages

    @property
    def position_embedding_stages(self) -> tuple[int, ...]:
        """The stages holding position embeddings, ascending, without negative indices."""
        return self._resolved.position_embedding_stages

    # -- grids and sizes ----------------------------------------------------------------------

    @property
    def dense(self) -> Grid:
        """The grid of attention / dense layers: axes tp, cp, dp, pp (and gtp when > 1)."""
        return self._resolved.dense

    @property
    def expert(self) -> Grid | None:
        """The grid of expert (MoE) layers: axes etp, ep, edp, pp (and egtp when > 1).

        None for a dense-only layout (ep = 1, etp = tp) whose order puts pp inside dp while
        cp > 1 (ezpz's ``tp-cp-pp-dp``): there no expert grid can share the dense pipeline, so
        the expert kinds mean what they mean for dense layers (etp = tp, edp = dp-cp, ep alone).
        """
        return self._resolved.expert

    @property
    def edp(self) -> int:
        """Expert data-parallel size, ``W / (etp * ep * pp * egtp)``."""
        return self.world_size // (self.etp * self.ep * self.pp * self.egtp)

    # -- kinds: look-ups in the kind table (kinds.py) -------------------------------------------

    @property
    def kinds(self) -> tuple[str, ...]:
        """Every group kind this topology defines, in Megatron's creation order."""
        return self._kinds

    def kind(self, name: str) -> Kind:
        """The kind called ``name`` (ours or Megatron's) in this topology.

        Raises:
            TopologyError: for a name that is no kind of this topology.

        >>> Topology(16, tp=2, pp=4).kind("mp").axes
        ('tp', 'pp')
        """
        name, spec = self._spec(name)
        return spec.kind(self, name)

    def size(self, kind: str) -> int:
        """How many ranks one group of ``kind`` holds, in O(1).

        >>> topo = Topology(16, tp=2, pp=4)
        >>> topo.size("tp-dp"), topo.size("embedding")
        (4, 2)
        """
        name, spec = self._spec(kind)
        return spec.size(self, name)

    def groups(self, kind: str) -> GroupList:
        """All groups of ``kind``, lazily, in Megatron's order.

        >>> list(Topology(8, tp=2, pp=2).groups("tp-pp"))
        [(0, 1, 4, 5), (2, 3, 6, 7)]
        """
        name, spec = self._spec(kind)
        return spec.groups(self, name)

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
        name, spec = self._spec(kind, rank)
        return spec.group_of(self, name, rank)

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
        name, spec = self._spec(kind, rank)
        return spec.locate(self, name, rank)

    def has_group(self, rank: int, kind: str) -> bool:
        """True if ``rank`` belongs to some group of ``kind`` (only embeddings can say no)."""
        name, spec = self._spec(kind, rank)
        return spec.has_group(self, name, rank)

    # -- pipeline -----------------------------------------------------------------------------

    def stage(self, rank: int) -> int:
        """The rank's pipeline stage (its pp coordinate)."""
        return self.dense.index_in_group(rank, "pp")

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

    def layers(
        self, stage: int, num_layers: int, split: PipelineSplit | None = None
    ) -> tuple[tuple[int, ...], ...]:
        """The 0-based layers each virtual chunk of ``stage`` holds (one chunk without vpp).

        Without ``split``, ``pp * vpp`` must divide ``num_layers``; with it, Megatron's uneven
        split (:class:`PipelineSplit`).

        >>> Topology(4, pp=4, vpp=2).layers(0, 16)
        ((0, 1), (8, 9))
        >>> dsv3 = PipelineSplit(first_stage_layers=3, last_stage_layers=2)  # NeMo-RL's pp 16
        >>> Topology(16, pp=16).layers(0, 61, dsv3), Topology(16, pp=16).layers(15, 61, dsv3)
        (((0, 1, 2),), ((59, 60),))
        """
        if split is None:
            return virtual_layers(stage, num_layers, self.pp, self.vpp)
        check_split(split)
        if type(stage) is not int or not 0 <= stage < self.pp:
            raise TopologyError(
                f"stage {show(stage)} is out of range; valid stages: 0 to {self.pp - 1}"
            )
        return split.layers(num_layers, self.pp, self.vpp)[stage]

    def is_first_stage(self, rank: int, vp_stage: int | None = None) -> bool:
        """First stage; with ``vp_stage`` (and vpp set) also the first virtual chunk.

        Raises:
            TopologyError: ``vp_stage`` neither None nor an int in ``range(vpp)`` (``range(1)``
                without vpp).
        """
        if vp_stage is not None and self._vp(vp_stage) != 0:
            return False
        return self.stage(rank) == 0

    def is_last_stage(self, rank: int, vp_stage: int | None = None) -> bool:
        """Last stage; with ``vp_stage`` (and vpp set) also the last virtual chunk.

        Raises:
            TopologyError: ``vp_stage`` neither None nor an int in ``range(vpp)``.
        """
        if vp_stage is not None and self._vp(vp_stage) != (self.vpp or 1) - 1:
            return False
        return self.stage(rank) == self.pp - 1

    def in_embedding(self, rank: int, vp_stage: int | None = None) -> bool:
        """True if the rank holds word embeddings (in virtual chunk ``vp_stage``, if given).

        With virtual stages only the first chunk of the first stage and the last chunk of the
        last stage hold them, as in Megatron's ``is_rank_in_embedding_group``.

        Raises:
            TopologyError: ``vp_stage`` neither None nor an int in ``range(vpp)``.

        >>> Topology(4, pp=2, vpp=2).in_embedding(3, vp_stage=1)
        True
        """
        if vp_stage is not None:
            self._vp(vp_stage)
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
        check_rank(self.dense, rank)
        groups: dict[str, Ranks | None] = {}
        for kind in self.kinds:
            groups[kind] = self._ranks_of(rank, kind) if self.has_group(rank, kind) else None
        return RankInfo(
            rank=rank,
            dense=tuple(self.dense.coord(rank).items()),
            expert=() if self.expert is None else tuple(self.expert.coord(rank).items()),
            groups=tuple(groups.items()),
            pipeline=self.pipeline(rank),
        )

    # -- helpers ------------------------------------------------------------------------------

    def _spec(self, kind: object, rank: object = None) -> tuple[str, KindSpec]:
        """The canonical name and table row of ``kind``; with ``rank``, also check the rank."""
        name = self._kind(kind)
        if rank is not None:
            check_rank(self.dense, rank)
        return name, spec_of(name)

    def _kind(self, kind: object) -> str:
        if not isinstance(kind, str):
            raise TopologyError(f"kind must be a string like 'tp', got {show(kind)}")
        name = canonical_kind(kind)
        if name not in self._kinds:
            raise TopologyError(f"unknown kind {show(kind)}; valid kinds: {', '.join(self.kinds)}")
        return name

    def _ranks_of(self, rank: int, kind: str) -> Ranks:
        """``group_of(rank, kind)`` of a checked rank as a lazy :class:`Ranks`, in O(axes)."""
        name, spec = self._spec(kind)  # both callers have checked the rank
        return spec.ranks_of(self, name, rank)

    def _vp(self, vp_stage: object) -> int:
        """``vp_stage`` checked to be a virtual stage: an int (not a bool) in ``range(vpp)``,
        ``range(1)`` without vpp."""
        vpp = self.vpp or 1
        if type(vp_stage) is not int or not 0 <= vp_stage < vpp:
            raise TopologyError(
                f"vp_stage {show(vp_stage)} is not a virtual stage; valid: an int from 0 to "
                f"{vpp - 1} (range(vpp), vpp={self.vpp}) or None"
            )
        return vp_stage

    # -- text ---------------------------------------------------------------------------------

    def __str__(self) -> str:
        tokens = self.order.split("-")
        sizes = {"tp": self.tp, "cp": self.cp, "ep": self.ep, "dp": self.dp, "pp": self.pp}
        sizes |= {"gtp": self.gtp, "egtp": self.egtp}
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
        for name in ("tp", "pp", "cp", "ep", "gtp", "egtp"):
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


def _short(values: tuple[int, ...]) -> str:
    """``repr(values)``, or its ends and length when it is long."""
    if len(values) <= 16:
        return repr(values)
    return f"<{len(values)} items: {values[0]}, {values[1]}, {values[2]}, …, {values[-1]}>"
