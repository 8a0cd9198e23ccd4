"""The kind table: one record per group kind, and what a Topology asks of each (private).

Adding a kind is one new :class:`KindSpec` in :data:`TABLE` (at its place in Megatron's creation
order): the axes it spans on the dense or expert grid, or a :class:`~.derived.Derived` that
builds its groups; names, Megatron names, sizes, groups, lookups, membership and placement's
shapes all follow. What the checks, placement and the cost model know of a kind is in its row
too: the severity of its groups crossing nodes, its crossing class, its line of the estimate.

>>> [spec.name for spec in TABLE][:4]
['gtp', 'dp-cp', 'intra-dp-cp', 'dp']
>>> spec_of("hcp-1").name, spec_of("tp-dp").megatron_names
('hcp-<level>', ('tp_dp', 'tensor_and_data'))
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Literal, TypedDict, Unpack

import attrs

from .._layout.grid import Grid
from .._layout.groups import GroupList, Ranks
from .._layout.kind import Kind
from .._layout.spans import Shape
from .derived import (
    DP_REPLICATE,
    DP_SHARD,
    EMBEDDING,
    HCP_LEVEL,
    INTER_EDP,
    INTRA_DIST_OPT,
    INTRA_DP_CP,
    INTRA_EDP,
    POSITION_EMBEDDING,
    Derived,
    KindSource,
    grid_locate,
    splits_dp,
)

__all__ = [
    "ALIASES",
    "COST_KINDS",
    "CROSSING_SEVERITY",
    "DENSE_KINDS",
    "EXPERT_KINDS",
    "GTP_AXES",
    "KIND_CLASSES",
    "MEGATRON_NAMES",
    "TABLE",
    "Kind",
    "KindSpec",
    "canonical_kind",
    "data_parallel_role",
    "spec_of",
]


_LEVEL = "<level>"


@attrs.frozen
class KindSpec:
    """One row of the kind table: a kind (or a family ``hcp-<level>``) and how it behaves.

    A grid kind names its ``grid`` (``"dense"`` or ``"expert"``) and ``axes``; an expert kind
    also says what it means in a dense-only layout without an expert grid (``dense_axes``).
    A derived kind has ``derived`` instead. ``needs`` is the Topology field that must be set
    for the kind to exist (``dist_opt_instances`` > 1, ``hcp_sizes`` with one kind a level,
    ``gtp`` or ``egtp`` > 1, or ``dp_split``: instances that cut the dp axis itself, see
    :func:`~.derived.splits_dp`). The GTP axes (:data:`GTP_AXES`) are grid axes only when larger
    than 1, so a kind that spans one (``tp-pp`` spans tp, gtp and pp) leaves it out otherwise.
    """

    name: str
    megatron_names: tuple[str, ...] = ()
    grid: Literal["dense", "expert"] | None = None
    axes: tuple[str, ...] = ()
    dense_axes: tuple[str, ...] = ()
    derived: Derived | None = None
    needs: Literal["dist_opt_instances", "hcp_sizes", "dp_split", "gtp", "egtp"] | None = None
    aliases: tuple[str, ...] = ()
    """Other names users know the kind by (torchtitan's ``dp_shard``), beyond Megatron's."""
    data_parallel: Literal["replica", "family"] | None = None
    """``"replica"``: the members hold copies of one shard (the kind spans a replicate axis
    alone, its axis is no shard coordinate); ``"family"``: the groups span data-parallel
    replicas (dropping a replica shrinks them); None: neither."""
    crossing_severity: Literal["error", "warning"] | None = None
    """How bad it is when the kind's groups leave a node, or a domain of a tier, that another
    order keeps them in (``<kind>-crosses-nodes``, ``<kind>-crosses-tier``): an error for tp
    and etp, which talk every layer, a warning for cp and ep; None: not checked."""
    crossing_class: tuple[int, int] | None = None
    """``(class, position)`` where placement counts the kind's crossings: classes by how much a
    crossing costs, most first (0: tensor parallelism talks every layer; 1: expert and context
    parallelism every MoE / attention layer; 2: pipeline and data parallelism once or twice per
    micro-batch or step), minimised class by class; ``position`` orders a class's kinds (as
    reports list them). None: placement does not count the kind."""
    cost_dimension: str | None = None
    """The line of the cost model's estimate (``topology.cost.DIMENSIONS``) priced on the
    kind's groups: ``dp`` on ``dp-cp`` groups (the gradient all-reduce spans cp too), the
    others on their namesakes; None: no line."""

    def names(self, topo: KindSource) -> tuple[str, ...]:
        """The concrete kinds this row gives ``topo`` (none when it does not apply)."""
        if self.needs == "dist_opt_instances" and topo.dist_opt_instances == 1:
            return ()
        if self.needs == "dp_split" and not splits_dp(topo):
            return ()
        if self.needs in GTP_AXES and getattr(topo, self.needs) == 1:
            return ()
        if self.name.endswith(_LEVEL):
            stem = self.name[: -len(_LEVEL)]
            return tuple(f"{stem}{level}" for level in range(len(topo.hcp_sizes or ())))
        return (self.name,)

    def place(self, topo: KindSource) -> tuple[Grid, tuple[str, ...]] | None:
        """The grid and axes the groups vary along, or None for a derived kind."""
        if self.grid == "dense":
            return topo.dense, _present(topo.dense, self.axes)
        if self.grid == "expert":
            expert = topo.expert
            if expert is None:
                return topo.dense, _present(topo.dense, self.dense_axes)
            return expert, _present(expert, self.axes)
        return None

    def kind(self, topo: KindSource, name: str) -> Kind:
        """The public description of kind ``name`` of ``topo``."""
        place = self.place(topo)
        grid, axes = (None, ()) if place is None else place
        return Kind(name, self.megatron_names, grid, axes)

    def size(self, topo: KindSource, name: str) -> int:
        """How many ranks one group holds."""
        place = self.place(topo)
        if place is not None:
            return place[0].size(*place[1])
        return self._derived.size(topo, name)

    def groups(self, topo: KindSource, name: str) -> GroupList:
        """All groups, lazily, in Megatron's order."""
        place = self.place(topo)
        if place is not None:
            return place[0].groups(*place[1])
        return self._derived.groups(topo, name)

    def locate(self, topo: KindSource, name: str, rank: int) -> tuple[int, int]:
        """``(group index, local rank)`` of a checked rank; raises for a rank in no group."""
        place = self.place(topo)
        if place is not None:
            return grid_locate(*place, rank)
        return self._derived.locate(topo, name, rank)

    def shape(self, topo: KindSource, name: str) -> Shape | None:
        """The groups as translates of one offset set (for placement), or None if irregular."""
        place = self.place(topo)
        if place is not None:
            return Shape.regular(*place[0].digits(*place[1]), topo.rank_offset)
        return self._derived.shape(topo, name)

    def has_group(self, topo: KindSource, name: str, rank: int) -> bool:
        """True if the checked rank belongs to some group."""
        return self.derived is None or self.derived.has_group(topo, name, rank)

    def ranks_of(self, topo: KindSource, name: str, rank: int) -> Ranks:
        """The group holding the checked rank, as a lazy :class:`Ranks`."""
        place = self.place(topo)
        if place is not None:
            found = place[0].groups(*place[1]).ranks_of(rank)
            assert found is not None  # the rank was checked
            return found
        return self.groups(topo, name).ranks(self.locate(topo, name, rank)[0])

    def group_of(self, topo: KindSource, name: str, rank: int) -> tuple[int, ...]:
        """The group holding the checked rank, as a tuple."""
        place = self.place(topo)
        if place is not None:
            return place[0].group_of(rank, *place[1])
        return self.groups(topo, name)[self.locate(topo, name, rank)[0]]

    def groups_per_parent(self, topo: KindSource) -> int:
        """How many groups of a distributed-optimizer kind cut one parent group (see
        :attr:`~.derived.Derived.per_parent`)."""
        per_parent = self._derived.per_parent
        assert per_parent is not None  # only the dist-opt splits' groups are irregular
        return per_parent(topo)

    @property
    def _derived(self) -> Derived:
        assert self.derived is not None  # every row is a grid kind or a derived one
        return self.derived


GTP_AXES = ("gtp", "egtp")
"""Megatron's GTP axes (dense ``gtp``, expert ``egtp``): grid axes only when larger than 1."""


def _present(grid: Grid, axes: tuple[str, ...]) -> tuple[str, ...]:
    """``axes`` without the GTP axes that ``grid`` lacks (size 1: no such axis)."""
    return tuple(a for a in axes if a not in GTP_AXES or a in grid.axes)


class _Facts(TypedDict, total=False):
    """The facts a grid kind's row may add (see :class:`KindSpec`)."""

    crossing_severity: Literal["error", "warning"]
    crossing_class: tuple[int, int]
    cost_dimension: str


def _dense(name: str, axes: tuple[str, ...], *megatron: str, **facts: Unpack[_Facts]) -> KindSpec:
    return KindSpec(name, megatron, grid="dense", axes=axes, **facts)


def _expert(
    name: str,
    axes: tuple[str, ...],
    dense: tuple[str, ...],
    *megatron: str,
    **facts: Unpack[_Facts],
) -> KindSpec:
    return KindSpec(name, megatron, grid="expert", axes=axes, dense_axes=dense, **facts)


def _gtp(name: str, axes: tuple[str, ...], *megatron: str) -> KindSpec:
    """A kind that exists only with its GTP axis (``gtp`` or ``egtp`` > 1)."""
    grid: Literal["dense", "expert"] = "expert" if "egtp" in axes else "dense"
    needs: Literal["gtp", "egtp"] = "egtp" if grid == "expert" else "gtp"
    return KindSpec(name, megatron, grid=grid, axes=axes, needs=needs)


def _dp(spec: KindSpec, role: Literal["replica", "family"]) -> KindSpec:
    """``spec`` marked as a data-parallel kind (see :attr:`KindSpec.data_parallel`)."""
    return attrs.evolve(spec, data_parallel=role)


def _dist_opt(name: str, derived: Derived, *megatron: str) -> KindSpec:
    return KindSpec(name, megatron, derived=derived, needs="dist_opt_instances")


TABLE: tuple[KindSpec, ...] = (
    _gtp("gtp", ("gtp",), "gtp_remat"),
    _dp(_dense("dp-cp", ("dp", "cp"), "dp_cp", cost_dimension="dp"), "family"),
    KindSpec(
        "intra-dp-cp",
        ("intra_dp_cp",),
        derived=INTRA_DP_CP,
        needs="dist_opt_instances",
        aliases=("dp-shard-cp", "dp_shard_cp"),
        data_parallel="family",
    ),
    _dp(_dense("dp", ("dp",), crossing_class=(2, 1)), "replica"),
    _dp(_gtp("gtp-dp", ("gtp", "dp"), "gtp_remat_dp"), "family"),
    _dp(_gtp("gtp-dp-cp", ("gtp", "dp", "cp"), "gtp_remat_dp_cp"), "family"),
    _dense(
        "cp",
        ("cp",),
        crossing_severity="warning",
        crossing_class=(1, 1),
        cost_dimension="cp",
    ),
    KindSpec("hcp-<level>", derived=HCP_LEVEL, needs="hcp_sizes"),
    _dense("tp-pp", ("tp", "gtp", "pp"), "mp"),
    _dense(
        "tp",
        ("tp",),
        crossing_severity="error",
        crossing_class=(0, 0),
        cost_dimension="tp",
    ),
    _dense("pp", ("pp",), crossing_class=(2, 0), cost_dimension="pp"),
    KindSpec("embedding", ("embd",), derived=EMBEDDING),
    KindSpec("position-embedding", ("pos_embd",), derived=POSITION_EMBEDDING),
    _dp(_dense("tp-dp-cp", ("tp", "gtp", "dp", "cp"), "tp_dp_cp"), "family"),
    _dp(_dense("tp-dp", ("tp", "gtp", "dp"), "tp_dp", "tensor_and_data"), "family"),
    _dense("tp-cp", ("tp", "cp"), "tp_cp"),
    _gtp("egtp", ("egtp",), "expt_gtp_remat"),
    _expert(
        "ep",
        ("ep",),
        (),
        crossing_severity="warning",
        crossing_class=(1, 0),
        cost_dimension="ep",
    ),
    _expert(
        "etp",
        ("etp",),
        ("tp",),
        "expt_tp",
        crossing_severity="error",
        crossing_class=(0, 1),
    ),
    _expert("etp-ep", ("etp", "ep"), ("tp",), "tp_ep"),
    _expert("etp-ep-pp", ("etp", "ep", "pp"), ("tp", "pp"), "tp_ep_pp"),
    _gtp("etp-ep-egtp-pp", ("etp", "ep", "egtp", "pp"), "tp_ep_gtp_remat_pp"),
    _dp(
        _expert(
            "edp",
            ("edp",),
            ("dp", "cp"),
            "expt_dp",
            crossing_class=(2, 2),
            cost_dimension="edp",
        ),
        "replica",
    ),
    _dp(_dist_opt("intra-edp", INTRA_EDP, "intra_expt_dp"), "family"),
    _dp(_dist_opt("inter-edp", INTER_EDP, "inter_dist_opt"), "family"),
    _dp(_gtp("egtp-edp", ("egtp", "edp"), "ep_gtp_remat_dp"), "family"),
    _dp(_dist_opt("intra-dist-opt", INTRA_DIST_OPT, "intra_dist_opt"), "family"),
    KindSpec(
        "dp-shard",
        derived=DP_SHARD,
        needs="dp_split",
        aliases=("dp_shard",),
        data_parallel="family",
    ),
    KindSpec(
        "dp-replicate",
        derived=DP_REPLICATE,
        needs="dp_split",
        aliases=("dp_replicate",),
        data_parallel="family",
    ),
)
"""Every kind, in Megatron's creation order (the order of ``Topology.kinds``), then the kinds
Megatron does not create (torchtitan's replicate x shard split of dp). Megatron creates the
GTP kinds with singleton groups, or as aliases of their plain kinds, when the GTP size is 1;
here they exist only when it is larger."""

_BY_NAME = MappingProxyType({spec.name: spec for spec in TABLE})
_FAMILIES = tuple(spec for spec in TABLE if spec.name.endswith(_LEVEL))

DENSE_KINDS = MappingProxyType({s.name: s.axes for s in TABLE if s.grid == "dense"})
"""Kinds of the dense grid (tp, cp, dp, pp) and the axes each one varies along."""

EXPERT_KINDS = MappingProxyType({s.name: s.axes for s in TABLE if s.grid == "expert"})
"""Kinds of the expert grid (etp, ep, edp, pp) and the axes each one varies along."""

MEGATRON_NAMES = MappingProxyType({m: s.name for s in TABLE for m in s.megatron_names})
"""Megatron's short names of process groups, mapped to our kinds."""

ALIASES = MappingProxyType({**MEGATRON_NAMES, **{a: s.name for s in TABLE for a in s.aliases}})
"""Every other name of a kind (Megatron's, torchtitan's), mapped to our kinds."""

CROSSING_SEVERITY = MappingProxyType(
    dict(
        sorted(
            ((s.name, s.crossing_severity) for s in TABLE if s.crossing_severity is not None),
            key=lambda item: item[1] != "error",
        )
    )
)
"""The kinds whose groups are checked for crossings, with the severity
(:attr:`KindSpec.crossing_severity`): the errors first, then the warnings, each in table order."""


def _crossing_classes() -> tuple[tuple[str, ...], ...]:
    placed = sorted((s.crossing_class, s.name) for s in TABLE if s.crossing_class is not None)
    classes: dict[int, list[str]] = {}
    for (level, _), name in placed:
        classes.setdefault(level, []).append(name)
    return tuple(tuple(names) for _, names in sorted(classes.items()))


KIND_CLASSES: tuple[tuple[str, ...], ...] = _crossing_classes()
"""The kinds placement counts, by crossing class, most costly first
(:attr:`KindSpec.crossing_class`): ``(("tp", "etp"), ("ep", "cp"), ("pp", "dp", "edp"))``."""

COST_KINDS = MappingProxyType({s.cost_dimension: s.name for s in TABLE if s.cost_dimension})
"""Each line of the cost model's estimate, with the kind whose groups price it
(:attr:`KindSpec.cost_dimension`)."""

_TOKEN_RANK = {"etp": 0, "tp": 0, "gtp": 1, "ep": 2, "egtp": 3, "dp": 4, "edp": 4, "cp": 5, "pp": 6}

_BY_AXES = MappingProxyType(
    {"-".join(s.axes): s.name for s in TABLE if s.grid is not None and s.axes}
)
"""Grid kinds by the axes they span, where those differ from the name (``tp-gtp-pp``)."""


def canonical_kind(kind: str) -> str:
    """Our name for ``kind``: other names (:data:`ALIASES`) are mapped, axis tokens put in
    canonical order.

    >>> canonical_kind("cp-dp"), canonical_kind("mp"), canonical_kind("pp-ep-etp")
    ('dp-cp', 'tp-pp', 'etp-ep-pp')
    >>> canonical_kind("dp-gtp"), canonical_kind("pp-gtp-tp"), canonical_kind("ep_gtp_remat_dp")
    ('gtp-dp', 'tp-pp', 'egtp-edp')
    """
    kind = ALIASES.get(kind, kind)
    tokens = kind.split("-")
    if len(tokens) > 1 and all(t in _TOKEN_RANK for t in tokens):
        ordered = "-".join(sorted(tokens, key=_TOKEN_RANK.__getitem__))
        if ordered in DENSE_KINDS or ordered in EXPERT_KINDS:
            return ordered
        return _BY_AXES.get(ordered, kind)
    return kind


def spec_of(name: str) -> KindSpec:
    """The table row of a canonical kind name (``"hcp-2"`` is a row of ``"hcp-<level>"``).

    Raises:
        KeyError: for a name that no row gives.
    """
    spec = _BY_NAME.get(name)
    if spec is not None:
        return spec
    for family in _FAMILIES:
        stem = family.name[: -len(_LEVEL)]
        if name.startswith(stem) and name[len(stem) :].isdigit():
            return family
    raise KeyError(name)


def data_parallel_role(name: str) -> Literal["replica", "family"] | None:
    """Whether kind ``name`` holds replicas of one shard, spans replicas, or neither.

    >>> data_parallel_role("dp"), data_parallel_role("tp-dp"), data_parallel_role("tp")
    ('replica', 'family', None)
    """
    return spec_of(name).data_parallel


def kinds_of(topo: KindSource) -> tuple[str, ...]:
    """Every kind ``topo`` defines, in Megatron's creation order."""
    return tuple(name for spec in TABLE for name in spec.names(topo))
