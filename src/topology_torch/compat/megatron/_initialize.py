"""Megatron's ``initialize_model_parallel`` and ``destroy_model_parallel`` on our groups.

The arguments are the union of megatron-core 0.16.1 to 0.19.2's: 0.16's positional order, then
0.17's ``rank_offset`` and ``local_world_size``, 0.19's ``gtp_remat_size`` and
``expert_gtp_remat_size``, and ``dynamic_context_parallel`` (Megatron's dev-branch spelling of
``hybrid_context_parallel``) with its ``min_dynamic_context_parallel_size`` as keywords.
Megatron's order of checks is kept: its assertions on the switches, sizes that do not fit
(``RuntimeError``), then "already initialized".
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, NoReturn, cast

import torch.distributed as dist

from topology import GroupList, Topology, TopologyError, hybrid_cp_groups

from ... import _default
from ..._args import check_size
from ..._process_groups import refuse
from .._errors import FacadeAssertionError, FacadeRuntimeError
from . import _hybrid, _options
from ._state import (
    OVERRIDES,
    OWNER,
    destroy_hooks,
    groups,
    make_singleton,
    overrides,
    release_extras,
)

__all__ = ["Plan", "destroy_model_parallel", "initialize_model_parallel", "plan"]


def _stages(
    topology: Topology, choose: Callable[[list[int]], list[int]] | None, argument: str
) -> tuple[int, ...] | None:
    """The pipeline stages a Megatron ``get_*embedding_ranks(pp_ranks)`` callable picks."""
    if choose is None:
        return None
    found: tuple[int, ...] | None = None
    for ranks in topology.groups("pp"):
        picked = list(choose(list(ranks)))
        if any(r not in ranks for r in picked):
            raise TopologyError(
                f"{argument} returned ranks {picked} outside the pipeline {list(ranks)}; "
                "return a subset of the ranks it is given"
            )
        stages = tuple(ranks.index(r) for r in picked)
        if found is not None and stages != found:
            raise TopologyError(
                f"{argument} picks stages {stages} of pipeline {list(ranks)} but {found} of "
                "the first pipeline; pick the same stages in every pipeline"
            )
        found = stages
    return found


def initialize_model_parallel(
    tensor_model_parallel_size: int = 1,
    pipeline_model_parallel_size: int = 1,
    virtual_pipeline_model_parallel_size: int | None = None,
    pipeline_model_parallel_comm_backend: str | None = None,
    use_sharp: bool = False,
    context_parallel_size: int = 1,
    hierarchical_context_parallel_sizes: Sequence[int] | None = None,
    hybrid_context_parallel: bool = False,
    expert_model_parallel_size: int = 1,
    num_distributed_optimizer_instances: int = 1,
    expert_tensor_parallel_size: int | None = None,
    nccl_communicator_config_path: str | None = None,
    distributed_timeout_minutes: int = 30,
    order: str = "tp-cp-ep-dp-pp",
    get_embedding_ranks: Callable[[list[int]], list[int]] | None = None,
    get_position_embedding_ranks: Callable[[list[int]], list[int]] | None = None,
    create_gloo_process_groups: bool = True,
    high_priority_stream_groups: Sequence[str] | None = None,
    sharp_enabled_group: str | None = None,
    create_all_gather_group: bool | None = False,
    *,
    rank_offset: int = 0,
    local_world_size: int | None = None,
    gtp_remat_size: int = 1,
    expert_gtp_remat_size: int = 1,
    dynamic_context_parallel: bool = False,
    min_dynamic_context_parallel_size: int = 1,
    strategy: str = "auto",
    hybrid_groups: str = "lazy",
) -> None:
    """Create Megatron's groups for the whole default group (see the package docstring).

    The arguments are megatron-core's (0.16.1's order; 0.17's ``rank_offset`` and
    ``local_world_size``, 0.19's ``gtp_remat_size`` and ``expert_gtp_remat_size`` by keyword).
    NCCL settings are honoured where a group's backend is NCCL: ``nccl_communicator_config_path``
    (a YAML file of per-group ``cga_cluster_size``, ``max_ctas``, ``min_ctas``, ``net_name``,
    ``is_high_priority_stream``) and ``high_priority_stream_groups`` become that group's
    ``pg_options``, and ``use_sharp`` enables SHARP (``NCCL_COLLNET_ENABLE``) while the
    data-parallel (or ``dp_replica``) group's communicator is set up. On gloo they are validated
    and have nothing to tune. ``create_all_gather_group`` makes a second communicator with the
    ``dp-cp`` ranks (``get_data_parallel_group(with_context_parallel=True,
    independent_all_gather=True)``). ``gtp_remat_size`` and ``expert_gtp_remat_size`` add
    Megatron's GTP axes (kinds ``gtp`` and ``egtp``); as in Megatron, GTP leaves out the gloo
    companions. ``hybrid_context_parallel`` (or ``dynamic_context_parallel``) adds Megatron's
    hybrid dp-cp groups (``get_hybrid_data_context_parallel_groups(group_size=...)``, blocks of
    2, 4, ... members of each dp-cp group, :func:`topology.hybrid_cp_groups`) in one creation
    call per size and rank; the dynamic spelling follows Megatron's dev branch: sizes from
    ``min_dynamic_context_parallel_size`` (default 1: one-rank groups too), where 0.19.2's
    hybrid ones start at 2 (or at that minimum, if above). ``hybrid_groups`` (ours) says when:
    ``"lazy"`` on a size's first get where the strategy makes members-only groups, ``"eager"``
    here (``split`` and ``all`` always make them here), then, on NCCL, a warm-up barrier on each
    group as Megatron's dev branch does (its ``eager_initialize_dynamic_cp_communicators``).
    Our groups span the whole default group: ``rank_offset`` must be 0 and
    ``local_world_size`` None or the world size. ``strategy`` is ours (see
    ``ProcessGroups.create``; ``auto`` picks the fastest the default group allows).

    Raises:
        FacadeAssertionError: torch.distributed is not initialized, the groups exist already, or
            an argument Megatron asserts on (an ``AssertionError`` and a ``TopologyError``).
        FacadeRuntimeError: sizes that do not fit the world, as Megatron raises them.
        TopologyError: other invalid arguments, with the arithmetic.
    """
    arguments = dict(locals())
    arguments.pop("strategy")
    arguments.pop("hybrid_groups")
    if not dist.is_available() or not dist.is_initialized():
        raise FacadeAssertionError(
            "torch.distributed is not initialized; call torch.distributed.init_process_group(...) "
            "on every rank before initialize_model_parallel"
        )
    problem: TopologyError | None = None
    try:
        made = plan(**arguments)
    except TopologyError as error:
        problem = error
    if problem is None and hybrid_groups not in _hybrid.HYBRID_GROUPS:
        problem = TopologyError(
            f"hybrid_groups must be 'lazy' or 'eager', got {hybrid_groups!r}; 'lazy' makes each "
            "hybrid group on its first get, 'eager' in initialize_model_parallel"
        )
    if problem is None and _default.held_by(OWNER) is not None:
        problem = FacadeAssertionError(
            f"compat.megatron is already initialized with {groups().topology}; "
            "call compat.megatron.destroy_model_parallel() first"
        )
    if problem is not None:
        _refuse(problem)  # every rank hears of it, nobody waits
    _default.claim(
        OWNER,
        made.topology,
        backends={"pp": pipeline_model_parallel_comm_backend},
        timeout=timedelta(minutes=distributed_timeout_minutes),
        gloo=made.gloo,
        strategy=strategy,
        independent=("dp-cp",) if create_all_gather_group else (),
        pg_options=made.options,
    )
    if 1 in (gtp_remat_size, expert_gtp_remat_size):
        make_singleton()  # Megatron's GTP groups of size 1 (made on first use)
    if virtual_pipeline_model_parallel_size is not None:
        overrides["vpp_rank"] = 0
    if use_sharp:
        _options.enable_sharp(
            groups(), "inter-edp" if sharp_enabled_group == "dp_replica" else "dp-cp"
        )
    if made.hybrid is not None:
        try:
            _hybrid.make(
                made.hybrid,
                groups().strategy,
                made.options.get("dp-cp"),
                hybrid_groups == "eager",
                groups().group("dp-cp"),
            )
        except BaseException:
            destroy_model_parallel()
            raise


class Plan:
    """What :func:`plan` decided: the Topology, its gloo companions, NCCL options and hybrid
    dp-cp groups (None without hybrid context parallelism)."""

    def __init__(
        self,
        topology: Topology,
        gloo: tuple[str, ...],
        options: dict[str, Any],
        hybrid: Mapping[int, GroupList] | None = None,
    ):
        self.topology = topology
        self.gloo = gloo
        self.options = options
        self.hybrid = hybrid


def plan(
    tensor_model_parallel_size: int = 1,
    pipeline_model_parallel_size: int = 1,
    virtual_pipeline_model_parallel_size: int | None = None,
    pipeline_model_parallel_comm_backend: str | None = None,
    use_sharp: bool = False,
    context_parallel_size: int = 1,
    hierarchical_context_parallel_sizes: Sequence[int] | None = None,
    hybrid_context_parallel: bool = False,
    expert_model_parallel_size: int = 1,
    num_distributed_optimizer_instances: int = 1,
    expert_tensor_parallel_size: int | None = None,
    nccl_communicator_config_path: str | None = None,
    distributed_timeout_minutes: int = 30,
    order: str = "tp-cp-ep-dp-pp",
    get_embedding_ranks: Callable[[list[int]], list[int]] | None = None,
    get_position_embedding_ranks: Callable[[list[int]], list[int]] | None = None,
    create_gloo_process_groups: bool = True,
    high_priority_stream_groups: Sequence[str] | None = None,
    sharp_enabled_group: str | None = None,
    create_all_gather_group: bool | None = False,
    *,
    rank_offset: int = 0,
    local_world_size: int | None = None,
    gtp_remat_size: int = 1,
    expert_gtp_remat_size: int = 1,
    dynamic_context_parallel: bool = False,
    min_dynamic_context_parallel_size: int = 1,
) -> Plan:
    """Check :func:`initialize_model_parallel`'s arguments in Megatron's order; make nothing.

    Every rank decides alike (no collective), so callers may raise its errors on every rank.

    Raises:
        as :func:`initialize_model_parallel`, but "already initialized".
    """
    _check_flags(
        use_sharp,
        sharp_enabled_group,
        num_distributed_optimizer_instances,
        distributed_timeout_minutes,
        {
            "create_gloo_process_groups": create_gloo_process_groups,
            "create_all_gather_group": create_all_gather_group,
            "hybrid_context_parallel": hybrid_context_parallel,
            "dynamic_context_parallel": dynamic_context_parallel,
        },
    )
    _check_span(rank_offset, local_world_size)
    gtp = (gtp_remat_size, expert_gtp_remat_size)
    uses_gtp = any(type(v) is int and v > 1 for v in gtp)
    if uses_gtp and num_distributed_optimizer_instances != 1:
        raise FacadeAssertionError(
            f"gtp_remat_size({gtp[0]}) or expert_gtp_remat_size({gtp[1]}) above 1 with "
            f"num_distributed_optimizer_instances({num_distributed_optimizer_instances}) is not "
            "supported by Megatron; use one distributed-optimizer instance with GTP"
        )
    topology = _topology(
        tensor_model_parallel_size,
        pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size,
        context_parallel_size,
        hierarchical_context_parallel_sizes,
        expert_model_parallel_size,
        num_distributed_optimizer_instances,
        expert_tensor_parallel_size,
        order,
        get_embedding_ranks,
        get_position_embedding_ranks,
        gtp,
    )
    configs = _options.read_config(nccl_communicator_config_path)
    configs = _options.with_high_priority(configs, high_priority_stream_groups)
    options = _options.pg_options(
        configs, topology, str(dist.get_backend()), pipeline_model_parallel_comm_backend
    )
    hybrid = None
    smallest = check_size("min_dynamic_context_parallel_size", min_dynamic_context_parallel_size)
    if hybrid_context_parallel or dynamic_context_parallel:
        if not dynamic_context_parallel:
            smallest = max(smallest, 2)  # 0.19.2's hybrid groups start at 2, dev's dynamic at 1
        try:  # Megatron asserts an even dp * cp, and (its arguments) a minimum up to dp * cp
            hybrid = hybrid_cp_groups(topology, min_size=smallest)
        except TopologyError as error:
            raise FacadeAssertionError(str(error)) from error
    return Plan(topology, _gloo(topology, create_gloo_process_groups, gtp), options, hybrid)


def _gloo(topology: Topology, wanted: bool, gtp: tuple[int, int]) -> tuple[str, ...]:
    """The kinds with gloo companions: Megatron's, none with GTP, no expert ones with EGTP."""
    if not wanted or gtp[0] > 1:
        return ()
    kinds: tuple[str, ...] = ("dp-cp", "dp", "edp")
    if topology.dist_opt_instances > 1:
        kinds += ("intra-dp-cp", "intra-edp")
    return tuple(k for k in kinds if gtp[1] == 1 or k not in ("edp", "intra-edp"))


def _check_span(rank_offset: object, local_world_size: object) -> None:
    """Our groups cover the whole default group: no offset, no smaller world."""
    world = dist.get_world_size()
    if rank_offset != 0:
        raise FacadeAssertionError(
            f"rank_offset={rank_offset!r} is not supported by this façade: its groups span the "
            "whole default group from rank 0; leave rank_offset=0 (or make a default group of "
            "the ranks you mean)"
        )
    if local_world_size is not None and local_world_size != world:
        raise FacadeAssertionError(
            f"local_world_size={local_world_size!r} is not supported by this façade: its groups "
            f"span the whole default group of {world} ranks; leave it None or {world}"
        )


def _refuse(problem: TopologyError) -> NoReturn:
    """``refuse`` that keeps the class of ``problem`` (Megatron's AssertionError/RuntimeError)."""
    try:
        refuse(problem)
    except TopologyError as error:
        if type(error) is type(problem) or not isinstance(problem, AssertionError | RuntimeError):
            raise
        raise type(problem)(str(error)) from error


def _check_flags(
    use_sharp: bool,
    sharp_enabled_group: str | None,
    instances: int,
    timeout_minutes: object,
    flags: Mapping[str, object],
) -> None:
    """Megatron's checks of the switches (its assertions), and ours of their types."""
    if use_sharp:
        if sharp_enabled_group not in (None, "dp", "dp_replica"):
            raise FacadeAssertionError(
                f"sharp_enabled_group must be 'dp' or 'dp_replica', got {sharp_enabled_group!r}"
            )
        if sharp_enabled_group == "dp_replica" and instances <= 1:
            raise FacadeAssertionError(
                f"sharp_enabled_group='dp_replica' needs num_distributed_optimizer_instances > 1, "
                f"got {instances}"
            )
    elif sharp_enabled_group is not None:
        raise FacadeAssertionError(
            f"sharp_enabled_group={sharp_enabled_group!r} is only valid with use_sharp=True"
        )
    check_size("distributed_timeout_minutes", timeout_minutes)
    for name, flag in flags.items():
        if flag is not None and type(flag) is not bool:
            raise TopologyError(f"{name} must be True or False, got {flag!r}")


def _topology(
    tp: int,
    pp: int,
    vpp: int | None,
    cp: int,
    hcp_sizes: Sequence[int] | None,
    ep: int,
    instances: int,
    etp: int | None,
    order: str,
    get_embedding_ranks: Callable[[list[int]], list[int]] | None,
    get_position_embedding_ranks: Callable[[list[int]], list[int]] | None,
    gtp: tuple[int, int],
) -> Topology:
    """The Topology Megatron's arguments describe, over the whole default group.

    Sizes Megatron rejects with ``RuntimeError`` raise :class:`FacadeRuntimeError`; every other
    rejection of the core is a :class:`FacadeAssertionError` (Megatron asserts, or fails later).
    """
    world = dist.get_world_size()
    _runtime_checks(world, tp, pp, vpp, cp, ep, etp, order, gtp)
    try:
        return _build(
            world,
            tp,
            pp,
            vpp,
            cp,
            hcp_sizes,
            ep,
            instances,
            etp,
            order,
            get_embedding_ranks,
            get_position_embedding_ranks,
            gtp,
        )
    except FacadeAssertionError:
        raise
    except TopologyError as error:
        raise FacadeAssertionError(str(error)) from error


def _runtime_checks(
    world: int,
    tp: object,
    pp: object,
    vpp: object,
    cp: object,
    ep: object,
    etp: object,
    order: object,
    gtp: tuple[object, object],
) -> None:
    """Megatron's own ``RuntimeError`` cases, with the arithmetic."""
    if not all(type(v) is int and v >= 1 for v in (tp, pp, cp, ep, *gtp)):
        return  # the core names the bad size
    tp, pp, cp, ep, dense_gtp, expert_gtp = cast(
        "tuple[int, int, int, int, int, int]", (tp, pp, cp, ep, *gtp)
    )
    model = tp * pp * cp * dense_gtp
    if world % model:
        shown = f" * gtp({dense_gtp})" if dense_gtp > 1 else ""
        raise FacadeRuntimeError(
            f"world_size ({world}) is not divisible by tp({tp}) * pp({pp}) * cp({cp}){shown} "
            f"= {model}"
        )
    if vpp is not None and pp <= 1:
        raise FacadeRuntimeError(
            f"virtual_pipeline_model_parallel_size={vpp!r} needs pipeline_model_parallel_size "
            f"> 1 (the interleaved schedule), got pp({pp})"
        )
    expert_tp = tp if etp is None else etp
    expert = expert_tp * ep * pp * expert_gtp if type(expert_tp) is int and expert_tp >= 1 else 0
    if expert and world % expert:
        shown = f" * egtp({expert_gtp})" if expert_gtp > 1 else ""
        raise FacadeRuntimeError(
            f"world_size ({world}) is not divisible by etp({expert_tp}) * ep({ep}) * pp({pp})"
            f"{shown} = {expert}"
        )
    if isinstance(order, str):
        named = order.lower().split("-")
        sizes = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "dp": world // model}
        for name, size in sizes.items():
            if size != 1 and name not in named:
                raise FacadeRuntimeError(
                    f"{name}({size}) is above 1 but order {order!r} does not name it; "
                    f"add {name!r} to the order"
                )


def _build(
    world: int,
    tp: int,
    pp: int,
    vpp: int | None,
    cp: int,
    hcp_sizes: Sequence[int] | None,
    ep: int,
    instances: int,
    etp: int | None,
    order: str,
    get_embedding_ranks: Callable[[list[int]], list[int]] | None,
    get_position_embedding_ranks: Callable[[list[int]], list[int]] | None,
    gtp: tuple[int, int],
) -> Topology:
    if hcp_sizes is not None and not isinstance(hcp_sizes, Sequence):
        raise TopologyError(
            f"hierarchical_context_parallel_sizes must be a sequence of ints, got {hcp_sizes!r}"
        )
    sizes: dict[str, Any] = dict(
        tp=tp,
        pp=pp,
        cp=cp,
        ep=ep,
        etp=etp,
        vpp=vpp,
        order=order,
        dist_opt_instances=instances,
        hcp_sizes=tuple(hcp_sizes) if hcp_sizes else None,
    )
    # Megatron's GTP axes; given only when used, so a Topology without them is unchanged
    sizes.update({name: size for name, size in zip(("gtp", "egtp"), gtp, strict=True) if size != 1})
    topology = Topology(world, **sizes)
    embedding = _stages(topology, get_embedding_ranks, "get_embedding_ranks")
    position = _stages(topology, get_position_embedding_ranks, "get_position_embedding_ranks")
    if embedding is None and position is None:
        return topology
    if embedding is not None:
        sizes["embedding_stages"] = embedding
    if position is not None:
        sizes["position_embedding_stages"] = position
    return Topology(world, **sizes)


def _release_nccl_ep() -> None:
    """Megatron 0.19's first step of teardown: release the NCCL EP context (its ``ncclep`` flex
    dispatcher's) before any communicator goes. A no-op unless Megatron's ``fused_a2a`` module is
    loaded (nothing else can have made one); its errors never block teardown, as in Megatron."""
    module = sys.modules.get("megatron.core.transformer.moe.fused_a2a")
    finalize = getattr(module, "nccl_ep_finalize", None)
    if callable(finalize):
        with contextlib.suppress(Exception):  # Megatron: "finalize must never block teardown"
            finalize()


def destroy_model_parallel() -> None:
    """Release Megatron's NCCL EP context (where it has one), destroy every group
    ``initialize_model_parallel`` made (a no-op when none) and clear the ``set_*`` overrides.

    Raises:
        TopologyError: the default groups were made by another façade (they are left alone).
    """
    _release_nccl_ep()
    _hybrid.release_all()
    _default.release(OWNER)
    release_extras()
    overrides.update(dict.fromkeys(OVERRIDES))
    for hook in destroy_hooks:
        hook()
