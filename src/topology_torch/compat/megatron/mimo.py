"""Megatron-LM's MIMO topology (``examples/mimo/training/topology.py``) without its cost.

``create_topology(specs)`` returns what Megatron's does: a :class:`HyperCommGrid` per module
(``grids``), a ``ProcessGroupCollection`` per module (``module_pgs``) and the
``MultiModuleProcessGroupCollection`` of the modules this rank serves
(``schedule_pg_collection``), with every group holding the same ranks as Megatron's. Megatron
creates each module's ~20 group families one after another through
``new_subgroups_by_enumeration`` (every rank calls ``new_group`` for every group of every
module: 634 calls per rank for two 32-rank modules at tp 2, pp 2); here the modules are one
:class:`topology.Modules` value and its :meth:`~topology.Modules.schedule` makes every distinct
rank set once, in calls that serve the same family of every disjoint module together: one
``split_group`` per call on a bound NCCL group, else one ``new_group`` per group this rank belongs
to (``benchmarks/bench_mimo.py``: 7 calls per rank there).

Each spec is a :class:`topology.Topology` over its ranks: the base grid ``[tp, gtp_remat, cp, dp,
pp]`` is its dense grid (order ``tp-cp-ep-dp-pp``, gtp right after tp) and the expert view
``[expt_tp, ep, expt_gtp_remat, expt_dp, pp]`` its expert grid, so each Megatron family is one of
its kinds (:data:`FAMILIES`); only the language module gets embedding groups (Megatron's rule:
first and last pipeline stage, and the first for position embeddings).

SPMD contract: call :func:`create_topology` and ``destroy`` on every rank of the default group,
with equal arguments, in the same order.

>>> specs = [ModuleGridSpec("vision", 8), ModuleGridSpec("language", 8, tp=2, rank_offset=8)]
>>> specs[1].dp, modules_of(specs).world_size
(4, 16)
>>> topo = create_topology(specs)  # doctest: +SKIP
>>> topo.module_pgs["language"].tp, topo.grids["vision"].get_pg("dp")  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from topology import AxisGroups, Grid, Module, Modules, Topology, TopologyError, mimo_layout

from ... import _mesh
from ..._agreement import Proposal, agree, arrival_deadline, barrier, fingerprint
from ..._args import check_index, check_size
from ..._creation import Registry, resolve_strategy
from ..._creation_plan import Channel, key_of
from ..._process_groups import require_initialized
from .hyper_comm_grid import HyperCommGrid, attach_group

__all__ = [
    "FAMILIES",
    "LANGUAGE",
    "HeteroTopology",
    "ModuleGridSpec",
    "create_topology",
    "modules_of",
]

LANGUAGE = "language"
"""The language module's name (Megatron's ``MIMO_LANGUAGE_MODULE_KEY``)."""
EXPERT = "expert"  # the expert view's name on each grid
SPAN = "span"  # the schedule's use name of a module's whole span (Megatron's intra_dist_opt)
BASE_DIMS = ["tp", "gtp_remat", "cp", "dp", "pp"]
EXPERT_DIMS = ["expt_tp", "ep", "expt_gtp_remat", "expt_dp", "pp"]

FAMILIES: tuple[tuple[str, tuple[str, ...], str | None, tuple[str, ...], str], ...] = (
    ("tp", ("tp",), None, ("tp",), "tp"),
    ("gtp_remat", ("gtp_remat",), None, ("gtp_remat",), "gtp"),
    ("cp", ("cp",), None, ("cp",), "cp"),
    ("pp", ("pp",), None, ("pp",), "pp"),
    ("dp", ("dp",), None, ("dp",), "dp"),
    ("dp_cp", ("dp_cp", "intra_dp_cp"), None, ("dp", "cp"), "dp-cp"),
    ("gtp_remat_dp_cp", ("dp_cp_gtp_remat",), None, ("gtp_remat", "dp", "cp"), "gtp-dp-cp"),
    ("tp_cp", ("tp_cp",), None, ("tp", "cp"), "tp-cp"),
    ("mp", ("mp",), None, ("tp", "gtp_remat", "pp"), "tp-pp"),
    ("tp_dp", ("tp_dp",), None, ("tp", "gtp_remat", "dp"), "tp-dp"),
    ("tp_dp_cp", ("tp_dp_cp",), None, ("tp", "gtp_remat", "dp", "cp"), "tp-dp-cp"),
    ("intra_dist_opt_instance", ("intra_dist_opt",), None, tuple(BASE_DIMS), SPAN),
    ("ep", ("ep",), EXPERT, ("ep",), "ep"),
    ("ep_tp", ("expt_tp",), EXPERT, ("expt_tp",), "etp"),
    ("expt_gtp_remat", ("expt_gtp_remat",), EXPERT, ("expt_gtp_remat",), "egtp"),
    ("ep_dp", ("expt_dp", "intra_expt_dp"), EXPERT, ("expt_dp",), "edp"),
    ("tp_ep_mp", ("tp_ep",), EXPERT, ("expt_tp", "ep"), "etp-ep"),
    ("tp_ep_pp", ("tp_ep_pp",), EXPERT, ("expt_tp", "ep", "pp"), "etp-ep-pp"),
    (
        "tp_ep_gtp_remat_pp",
        ("tp_ep_pp_with_egtp_remat",),
        EXPERT,
        ("expt_tp", "ep", "expt_gtp_remat", "pp"),
        "etp-ep-egtp-pp",
    ),
    ("ep_gtp_remat_dp", ("expt_dp_gtp_remat",), EXPERT, ("expt_gtp_remat", "expt_dp"), "egtp-edp"),
)
"""Megatron's families, in its creation order: ``(pg name, ProcessGroupCollection fields, view,
dims, our kind)``. A GTP kind absent at size 1 falls back to the kind without the GTP axis (the
same groups). The language module adds ``embd`` / ``pos_embd`` (``embedding`` kinds)."""
EMBEDDINGS = (("embd", "embedding"), ("pos_embd", "position-embedding"))
_FALLBACK = {"gtp-dp-cp": "dp-cp", "etp-ep-egtp-pp": "etp-ep-pp", "egtp-edp": "edp"}


@attrs.frozen
class ModuleGridSpec:
    """One module's grid factorization and placement (Megatron MIMO's ``ModuleGridSpec``).

    ``num_ranks`` is the ground truth; ``dp = num_ranks / (tp * gtp_remat * cp * pp)`` and
    ``expt_dp = num_ranks / (expt_tp * ep * expt_gtp_remat * pp)``. Experts default to
    ``expt_tp=1`` (Megatron MIMO's choice, not ``initialize_model_parallel``'s etp = tp).

    >>> ModuleGridSpec("language", 16, tp=2, pp=2, ep=4).expt_dp
    2

    Raises:
        TopologyError: a size that is not a positive int, or one that does not divide
            ``num_ranks`` (a ``ValueError``, as Megatron raises).
    """

    name: str
    num_ranks: int
    tp: int = 1
    cp: int = 1
    pp: int = 1
    ep: int = 1
    gtp_remat: int = 1
    rank_offset: int = 0
    expt_tp: int = 1
    expt_gtp_remat: int = 1

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TopologyError(f"a module name must be a non-empty string, got {self.name!r}")
        for field in attrs.fields(ModuleGridSpec)[1:]:
            if field.name != "rank_offset":
                check_size(field.name, getattr(self, field.name))
        check_index("rank_offset", self.rank_offset)
        dense = self.tp * self.gtp_remat * self.cp * self.pp
        if self.num_ranks % dense:
            raise TopologyError(
                f"num_ranks ({self.num_ranks}) of module {self.name!r} must be divisible by "
                f"tp*gtp_remat*cp*pp = {self.tp}*{self.gtp_remat}*{self.cp}*{self.pp} = {dense}; "
                f"use a multiple of {dense}"
            )
        expert = self.expt_tp * self.ep * self.expt_gtp_remat * self.pp
        if self.num_ranks % expert:
            raise TopologyError(
                f"num_ranks ({self.num_ranks}) of module {self.name!r} must be divisible by "
                f"expt_tp*ep*expt_gtp_remat*pp = {self.expt_tp}*{self.ep}*"
                f"{self.expt_gtp_remat}*{self.pp} = {expert}; use a multiple of {expert}"
            )

    @property
    def dp(self) -> int:
        """Data-parallel size: ``num_ranks / (tp * gtp_remat * cp * pp)``."""
        return self.num_ranks // (self.tp * self.gtp_remat * self.cp * self.pp)

    @property
    def expt_dp(self) -> int:
        """Expert data-parallel size: ``num_ranks / (expt_tp * ep * expt_gtp_remat * pp)``."""
        return self.num_ranks // (self.expt_tp * self.ep * self.expt_gtp_remat * self.pp)

    @property
    def size(self) -> int:
        """Total ranks spanned by this module's grid."""
        return self.num_ranks

    def topology(self) -> Topology:
        """The core's layout of this module at rank 0: base grid dense, expert view expert
        (``topology.mimo_layout``: one translation of MIMO's names and defaults)."""
        fields = attrs.asdict(self)
        del fields["name"], fields["rank_offset"]
        return mimo_layout(fields)


def modules_of(specs: Sequence[ModuleGridSpec]) -> Modules:
    """The specs as one pure :class:`topology.Modules` value, validated as Megatron's MIMO does.

    Raises:
        TopologyError: no spec, not exactly one named ``"language"``, or spans that neither
            coincide nor tile ``[0, world_size)``.
    """
    if isinstance(specs, ModuleGridSpec) or not isinstance(specs, Sequence) or not specs:
        raise TopologyError(
            f"create_topology requires a non-empty list of ModuleGridSpec, got {specs!r}"
        )
    for spec in specs:
        if not isinstance(spec, ModuleGridSpec):
            raise TopologyError(f"specs must hold ModuleGridSpec values, got {spec!r}")
    languages = sum(1 for spec in specs if spec.name == LANGUAGE)
    if languages != 1:
        raise TopologyError(
            f"create_topology requires exactly one spec named {LANGUAGE!r} (the language "
            f"module), got {languages} among {[s.name for s in specs]}; name one {LANGUAGE!r}"
        )
    return Modules([Module(s.name, s.topology(), rank_offset=s.rank_offset) for s in specs])


def _kind(layout: Topology, kind: str) -> str | None:
    """Our kind for a family (the plain one where a GTP axis is 1); None for a size-1 axis."""
    if kind in layout.kinds:
        return kind
    return _FALLBACK.get(kind)


@attrs.define
class HeteroTopology:
    """Process groups and rank topology of one MIMO run (Megatron's ``HeteroTopology``)."""

    grids: dict[str, HyperCommGrid]
    module_pgs: dict[str, Any]
    schedule_pg_collection: Any
    modules: Modules
    """The pure value the groups were made from (``topology.check_modules`` takes it)."""
    calls: int = 0
    """How many ``new_group`` / ``split_group`` calls this rank made."""
    _registry: Registry | None = None
    _held: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    """``{module: {our kind: this rank's group}}`` of the modules this rank serves."""

    def device_mesh(self, module: str, *dims: str, device_type: str | None = None) -> DeviceMesh:
        """A torch ``DeviceMesh`` over ``dims`` (our kinds, outermost first) of ``module``'s
        grid through this rank, whose dimension groups are the groups made here (no new group).

        The mesh is :meth:`topology_torch.ProcessGroups.device_mesh`'s for the module's layout
        (:attr:`topology.Module.layout`, global ranks): every rank of one mesh holds the same
        mesh tensor, dim names and communicators.

        >>> topo.device_mesh("language", "edp", "ep", "etp")  # doctest: +SKIP

        Raises:
            TopologyError: an unknown module, a rank that does not serve it, or dims
                :meth:`topology_torch.ProcessGroups.device_mesh` refuses.
        """
        placed = self.modules.module(module)
        held = self._held.get(module)
        if held is None:
            span = placed.span
            raise TopologyError(
                f"rank {dist.get_rank()} does not serve module {module!r}; ask one of its ranks "
                f"{span.start} to {span.stop - 1}"
            )
        layout = placed.layout
        assert isinstance(layout, Topology)  # modules_of places Topology layouts
        return _mesh.device_mesh(_ModuleGroups(layout, dist.get_rank(), held), dims, device_type)

    def destroy(self) -> None:
        """Destroy every process group made for this topology (each communicator once).

        SPMD contract: call on every rank, in the same order.
        """
        for grid in self.grids.values():
            grid.destroy()  # forgets the attached groups; they are the registry's
        self._held.clear()
        if self._registry is not None:
            for group in reversed(self._registry.owned):
                if group in dist.distributed_c10d._world.pg_map:
                    dist.destroy_process_group(group)
            self._registry.owned.clear()
            self._registry.groups.clear()
            self._registry = None


@attrs.frozen
class _ModuleGroups:
    """One module's groups through this rank, as :func:`topology_torch._mesh.device_mesh` reads
    them (its ``Groups``)."""

    topology: Topology
    global_rank: int
    held: dict[str, Any]

    def group(self, kind: str) -> Any:
        """This rank's group of ``kind`` (a Megatron name works), made by create_topology."""
        name = self.topology.kind(kind).name
        if name not in self.held:
            raise TopologyError(
                f"create_topology made no {kind!r} group (MIMO has no such family); use one of "
                f"{', '.join(self.held)}"
            )
        return self.held[name]


_created = 0  # create_topology calls in this process (names the store space of each)


def create_topology(
    specs: list[ModuleGridSpec], high_priority_stream_groups: list[str] | None = None
) -> HeteroTopology:
    """Build every module's grid, process groups and embedding groups, each rank set once.

    Args:
        specs: the modules; exactly one is named ``"language"``; spans all equal (colocated)
            or tiling ``[0, world_size)``.
        high_priority_stream_groups: Megatron's pg names (``"tp"``, ``"dp_cp"``, ``"embd"``,
            ...) whose groups get ``ProcessGroupNCCL.Options(is_high_priority_stream=True)``:
            those get communicators of their own.

    Raises:
        TopologyError: invalid specs or specs that do not tile the world, on every rank.
    """
    global _created
    require_initialized("create_topology")
    space = f"mimo/{_created}"
    _created += 1
    problem: TopologyError | None = None
    try:
        modules = modules_of(specs)
        _fill_world(modules)
        hot = tuple(high_priority_stream_groups or ())
        facts = {"specs": repr(list(specs)), "high priority": repr(hot)}
    except TopologyError as error:
        problem = error
        facts = {}
    mine = Proposal(0, {}, str(problem)) if problem else Proposal(fingerprint(facts), facts)
    deadline = arrival_deadline(None)
    agree(space, mine, deadline, "create_topology")
    if problem is not None:  # pragma: no cover - agree raised it on every rank
        raise problem
    registry = Registry(dist.get_rank(), f"{space}/{mine.digest}")
    try:
        made = _create(modules, hot, registry)
        barrier(f"{space}/done", deadline, "the end of create_topology")
        return _assemble(specs, modules, made, registry, hot)
    except BaseException:
        for group in reversed(registry.owned):
            if group in dist.distributed_c10d._world.pg_map:
                dist.destroy_process_group(group)
        raise


def _needed(modules: Modules, hot: tuple[str, ...]) -> dict[tuple[str, str], bool]:
    """``(module, kind) -> high priority?`` of every family a module uses (high priority when a
    pg name of that kind is in ``hot``); the language module adds its embedding kinds."""
    needed: dict[tuple[str, str], bool] = {}
    for module in modules.modules:
        layout = module.layout
        assert isinstance(layout, Topology)
        names = [(pg, SPAN if kind == SPAN else _kind(layout, kind)) for pg, *_, kind in FAMILIES]
        if module.name == LANGUAGE:
            names += list(EMBEDDINGS)
        for pg_name, kind in names:
            if kind is not None:
                use = (module.name, kind)
                needed[use] = needed.get(use, False) or pg_name in hot
    return needed


def _fill_world(modules: Modules) -> None:
    """``TopologyError`` unless the modules (valid: sharing one span or tiling theirs) cover the
    whole default group."""
    if modules.world_size != dist.get_world_size():
        raise TopologyError(
            f"module grids must partition the world [0, {dist.get_world_size()}) with no "
            f"gaps, but they cover [0, {modules.world_size}); size the modules to the world"
        )


def _validate_grid_layout(grids: Mapping[str, Any]) -> None:
    """Megatron's example helper, under its name: ``TopologyError`` (a ``ValueError``, as
    Megatron raises) unless the grids all share one span or are disjoint and partition the world.

    Each grid counts only by its span (``rank_offset``, ``size``: ours or Megatron's
    ``HyperCommGrid``); the rule is :class:`topology.Modules`' (one span, or spans tiling
    ``[0, world_size)``) and the default group's size. Megatron also cross-checks its
    ``RankRole``, which decides colocation by the same spans.

    Raises:
        TopologyError: spans that overlap without being equal, leave a gap, or do not reach the
            end of the world.
    """
    try:
        modules = Modules(
            [
                Module(name, AxisGroups(Grid.from_sizes(ranks=grid.size)), grid.rank_offset)
                for name, grid in grids.items()
            ]
        )
    except TopologyError as error:
        spans = {
            name: (grid.rank_offset, grid.rank_offset + grid.size) for name, grid in grids.items()
        }
        raise TopologyError(
            f"module grids {spans} must share one span or partition the world "
            f"[0, {dist.get_world_size()}) with no gaps: {error}"
        ) from error
    _fill_world(modules)


def _get_pg_options(group_name: str, high_priority_stream_groups: Sequence[str] | None) -> Any:
    """Megatron's example helper, under its name: high-priority NCCL options for the pg name
    ``group_name`` (``"tp"``, ``"dp_cp"``, ...) when it is in ``high_priority_stream_groups``,
    else None.

    >>> _get_pg_options("tp", None) is None
    True
    """
    if group_name not in (high_priority_stream_groups or ()):
        return None
    return dist.ProcessGroupNCCL.Options(is_high_priority_stream=True)


def _options(hot: tuple[str, ...]) -> Any:
    """The options of the high-priority communicators (those of any name in ``hot``)."""
    return _get_pg_options(hot[0], hot) if hot else None


def _create(modules: Modules, hot: tuple[str, ...], registry: Registry) -> dict[Any, Any]:
    """Make every needed rank set of the schedule once: one split per call (bound NCCL), else
    a ``new_group`` per set holding this rank. Returns ``{(ranks, hot): group}``."""
    strategy = resolve_strategy("auto")
    needed = _needed(modules, hot)
    options = _options(hot)
    plain = Channel("mimo", False, None, None)
    fast = Channel("mimo-high-priority", False, None, None, options=options)
    rank, world = registry.rank, dist.get_world_size()
    made: dict[Any, Any] = {}
    for call in modules.schedule(spans=True):
        for channel, priority in ((plain, False), (fast, True)):
            groups = [
                group
                for group, uses in zip(call.groups, call.served, strict=True)
                if any(use in needed and needed[use] == priority for use in uses)
            ]
            if not groups:
                continue
            if not priority and groups == [tuple(range(world))]:
                made[(groups[0], priority)] = dist.group.WORLD
                continue
            if strategy == "split":
                registry.split([list(g) for g in groups], channel)
            for group in groups:
                if strategy == "all":
                    registry.new_all(group, channel)
                elif strategy == "local" and rank in group:
                    registry.new_local(group, channel)
                if rank in group:
                    made[(group, priority)] = registry.get(key_of(group, channel))
    # every size-1 family of this rank: one communicator of this rank alone
    if strategy == "split":
        registry.split([[r] for r in range(world)], plain)
        made[((rank,), False)] = registry.get(key_of((rank,), plain))
    else:
        made[((rank,), False)] = registry.new_local((rank,), plain)
    return made


def _collection_classes() -> tuple[Any, Any]:
    """Megatron's ``ProcessGroupCollection`` and ``MultiModuleProcessGroupCollection`` where the
    installed megatron-core has them, else this module's stand-ins with the same fields."""
    try:
        from megatron.core import process_groups_config as config  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        return ModuleProcessGroups, MultiModuleProcessGroups
    return (
        getattr(config, "ProcessGroupCollection", ModuleProcessGroups),
        getattr(config, "MultiModuleProcessGroupCollection", MultiModuleProcessGroups),
    )


def _group_of(module: Module, kind: str | None, rank: int, made: dict[Any, Any], hot: bool) -> Any:
    """This rank's group of ``module``'s ``kind`` (None outside it; a size-1 axis, None kind,
    is this rank alone)."""
    alone = made[((rank,), False)]
    if rank not in module.span:
        return None
    if kind is None:
        return alone
    if kind == SPAN:
        ranks = tuple(module.span)
    elif not module.has_group(rank, kind):
        return None
    else:
        ranks = module.group_of(rank, kind)
    return alone if len(ranks) == 1 else made[(ranks, hot)]


def _assemble(
    specs: Sequence[ModuleGridSpec],
    modules: Modules,
    made: dict[Any, Any],
    registry: Registry,
    hot: tuple[str, ...],
) -> HeteroTopology:
    """Grids and collections holding the groups made, as Megatron lays them out per rank."""
    rank = registry.rank
    collection, multi = _collection_classes()
    needed = _needed(modules, hot)
    grids: dict[str, HyperCommGrid] = {}
    module_pgs: dict[str, Any] = {}
    held: dict[str, dict[str, Any]] = {}
    for spec, module in zip(specs, modules.modules, strict=True):
        layout = module.layout
        assert isinstance(layout, Topology)
        grid = HyperCommGrid(_base_shape(spec), BASE_DIMS, rank_offset=spec.rank_offset)
        grid.register_view(EXPERT, _expert_shape(spec), EXPERT_DIMS, shared_dims=["pp"])
        pgc = collection()
        for _, fields, view, dims, kind in FAMILIES:
            ours = SPAN if kind == SPAN else _kind(layout, kind)
            value = _group_of(
                module, ours, rank, made, needed.get((module.name, ours or ""), False)
            )
            attach_group(grid, list(dims), view, value)
            if value is not None and ours not in (None, SPAN):
                held.setdefault(module.name, {})[ours] = value
            for field in fields:
                setattr(pgc, field, value)
        for field, kind in EMBEDDINGS:
            hot_kind = needed.get((module.name, kind), False)
            value = _group_of(module, kind, rank, made, hot_kind) if spec.name == LANGUAGE else None
            setattr(pgc, field, value)
        grids[spec.name] = grid
        module_pgs[spec.name] = pgc
    served = {name: module_pgs[name] for name in modules.serves(rank)}
    language = LANGUAGE if LANGUAGE in served else None
    schedule_pgs = multi(module_pgs=served, language_model_module_name=language)
    return HeteroTopology(grids, module_pgs, schedule_pgs, modules, registry.calls, registry, held)


def _base_shape(spec: ModuleGridSpec) -> list[int]:
    """The base grid's shape, ``shape[0]`` fastest: ``[tp, gtp_remat, cp, dp, pp]``."""
    return [spec.tp, spec.gtp_remat, spec.cp, spec.dp, spec.pp]


def _expert_shape(spec: ModuleGridSpec) -> list[int]:
    """The expert view's shape: ``[expt_tp, ep, expt_gtp_remat, expt_dp, pp]``."""
    return [spec.expt_tp, spec.ep, spec.expt_gtp_remat, spec.expt_dp, spec.pp]


@dataclasses.dataclass
class ModuleProcessGroups:
    """Stand-in for Megatron's ``ProcessGroupCollection`` (megatron-core not installed): the
    fields MIMO sets, None until set."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return None


@dataclasses.dataclass
class MultiModuleProcessGroups:
    """Stand-in for megatron-core 0.19's ``MultiModuleProcessGroupCollection``."""

    module_pgs: dict[str, Any]
    language_model_module_name: str | None = None

    def has_language_model(self) -> bool:
        """Whether this rank serves the language module."""
        return self.language_model_module_name is not None

    def get_language_model_collection(self) -> Any:
        """The language module's collection (a ``TopologyError`` when this rank has none)."""
        if self.language_model_module_name is None:
            raise TopologyError("this rank serves no language module; ask has_language_model()")
        return self.module_pgs[self.language_model_module_name]

    def __getitem__(self, name: str) -> Any:
        return self.module_pgs[name]
