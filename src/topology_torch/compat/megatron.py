"""Megatron-core's ``parallel_state`` API over a :class:`topology.Topology` (a façade).

``initialize_model_parallel`` builds the same groups as Megatron-core 0.16 (same ranks, same
group order), but each rank only creates the distinct groups it belongs to and nothing leaks on
``destroy_model_parallel``. SPMD contract: call ``initialize_model_parallel`` and
``destroy_model_parallel`` on every rank, with equal arguments, in the same order.

>>> from topology_torch.compat import megatron as mpu  # doctest: +SKIP
>>> mpu.initialize_model_parallel(2, 4)  # doctest: +SKIP
>>> mpu.get_pipeline_model_parallel_next_rank()  # doctest: +SKIP
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, NoReturn, cast

import torch.distributed as dist

from topology import Topology, TopologyError

from .. import _default
from .._process_groups import ProcessGroups, refuse
from . import _megatron_install as _install
from . import _megatron_options as _options
from ._errors import (
    FacadeAssertionError,
    FacadeRuntimeError,
    NotInitializedError,
    owned_groups,
    topology_of,
)
from ._megatron_globals import GLOBALS
from ._megatron_rank_generator import RankGenerator, generate_masked_orthogonal_rank_groups

__all__ = [
    "RankGenerator",
    "default_embedding_ranks",
    "default_position_embedding_ranks",
    "destroy_model_parallel",
    "generate_masked_orthogonal_rank_groups",
    "get_all_ranks",
    "get_amax_reduction_group",
    "get_context_parallel_global_ranks",
    "get_context_parallel_group",
    "get_context_parallel_rank",
    "get_context_parallel_world_size",
    "get_data_modulo_expert_parallel_group",
    "get_data_parallel_group",
    "get_data_parallel_group_gloo",
    "get_data_parallel_rank",
    "get_data_parallel_src_rank",
    "get_data_parallel_world_size",
    "get_embedding_group",
    "get_expert_data_parallel_group",
    "get_expert_data_parallel_group_gloo",
    "get_expert_data_parallel_rank",
    "get_expert_data_parallel_world_size",
    "get_expert_model_parallel_group",
    "get_expert_model_parallel_rank",
    "get_expert_model_parallel_src_rank",
    "get_expert_model_parallel_world_size",
    "get_expert_tensor_and_model_parallel_group",
    "get_expert_tensor_and_model_parallel_rank",
    "get_expert_tensor_and_model_parallel_world_size",
    "get_expert_tensor_model_pipeline_parallel_group",
    "get_expert_tensor_parallel_group",
    "get_expert_tensor_parallel_rank",
    "get_expert_tensor_parallel_world_size",
    "get_hierarchical_context_parallel_groups",
    "get_hybrid_data_context_parallel_groups",
    "get_inter_distributed_optimizer_instance_group",
    "get_intra_distributed_optimizer_instance_group",
    "get_model_parallel_group",
    "get_model_parallel_src_rank",
    "get_nccl_options",
    "get_pipeline_model_parallel_first_rank",
    "get_pipeline_model_parallel_group",
    "get_pipeline_model_parallel_last_rank",
    "get_pipeline_model_parallel_next_rank",
    "get_pipeline_model_parallel_prev_rank",
    "get_pipeline_model_parallel_rank",
    "get_pipeline_model_parallel_world_size",
    "get_position_embedding_group",
    "get_tensor_and_context_parallel_group",
    "get_tensor_and_context_parallel_rank",
    "get_tensor_and_context_parallel_world_size",
    "get_tensor_and_data_parallel_group",
    "get_tensor_model_parallel_group",
    "get_tensor_model_parallel_rank",
    "get_tensor_model_parallel_src_rank",
    "get_tensor_model_parallel_world_size",
    "get_virtual_pipeline_model_parallel_rank",
    "get_virtual_pipeline_model_parallel_world_size",
    "has_separate_all_gather_group",
    "initialize_model_parallel",
    "install",
    "is_initialized",
    "is_installed",
    "is_pipeline_first_stage",
    "is_pipeline_last_stage",
    "is_rank_in_embedding_group",
    "is_rank_in_position_embedding_group",
    "is_unitialized",
    "model_parallel_is_initialized",
    "overwrite_nccl_comm_cfgs",
    "process_group_collection",
    "set_data_parallel_rank",
    "set_expert_model_parallel_rank",
    "set_expert_model_parallel_world_size",
    "set_expert_tensor_parallel_rank",
    "set_expert_tensor_parallel_world_size",
    "set_pipeline_model_parallel_rank",
    "set_pipeline_model_parallel_world_size",
    "set_tensor_model_parallel_rank",
    "set_tensor_model_parallel_world_size",
    "set_virtual_pipeline_model_parallel_rank",
    "set_virtual_pipeline_model_parallel_world_size",
    "uninstall",
]

OWNER = _default.Owner("compat.megatron", "initialize_model_parallel()", "destroy_model_parallel()")
# Megatron's settable values (``set_tensor_model_parallel_world_size`` ...): None means "ask the
# group". The one piece of façade state besides the default groups; destroy_model_parallel
# clears it, as Megatron does.
_OVERRIDES = (
    "tp_size",
    "tp_rank",
    "pp_size",
    "pp_rank",
    "vpp_size",
    "vpp_rank",
    "dp_size",
    "dp_rank",
    "ep_size",
    "ep_rank",
    "etp_size",
    "etp_rank",
)
_overrides: dict[str, int | None] = dict.fromkeys(_OVERRIDES)


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
    strategy: str = "auto",
) -> None:
    """Create Megatron's groups for the whole default group (see the module docstring).

    The arguments and their order are Megatron-core 0.16.1's. NCCL settings are honoured where
    a group's backend is NCCL: ``nccl_communicator_config_path`` (a YAML file of per-group
    ``cga_cluster_size``, ``max_ctas``, ``min_ctas``, ``net_name``, ``is_high_priority_stream``)
    and ``high_priority_stream_groups`` become that group's ``pg_options``, and ``use_sharp``
    enables SHARP (``NCCL_COLLNET_ENABLE``) while the data-parallel (or ``dp_replica``) group's
    communicator is set up. On gloo they are validated and have nothing to tune.
    ``create_all_gather_group`` makes a second communicator with the ``dp-cp`` ranks
    (``get_data_parallel_group(with_context_parallel=True, independent_all_gather=True)``).
    ``strategy`` is ours (see ``ProcessGroups.create``).

    Raises:
        FacadeAssertionError: torch.distributed is not initialized, the groups exist already, or
            an argument Megatron asserts on (an ``AssertionError`` and a ``TopologyError``).
        FacadeRuntimeError: sizes that do not fit the world, as Megatron raises them.
        TopologyError: other invalid arguments, with the arithmetic.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise FacadeAssertionError(
            "torch.distributed is not initialized; call torch.distributed.init_process_group(...) "
            "on every rank before initialize_model_parallel"
        )
    problem: TopologyError | None = None
    options: dict[str, Any] = {}
    try:
        _check_flags(
            use_sharp,
            sharp_enabled_group,
            num_distributed_optimizer_instances,
            hybrid_context_parallel,
            distributed_timeout_minutes,
            create_gloo_process_groups,
            create_all_gather_group,
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
        )
        configs = _options.read_config(nccl_communicator_config_path)
        configs = _options.with_high_priority(configs, high_priority_stream_groups)
        options = _options.pg_options(
            configs, topology, str(dist.get_backend()), pipeline_model_parallel_comm_backend
        )
    except TopologyError as error:
        problem = error
    if problem is None and _default.held_by(OWNER) is not None:
        problem = FacadeAssertionError(
            f"compat.megatron is already initialized with {_groups().topology}; "
            "call compat.megatron.destroy_model_parallel() first"
        )
    if problem is not None:
        _refuse(problem)  # every rank hears of it, nobody waits
    gloo: tuple[str, ...] = ()
    if create_gloo_process_groups:
        gloo = ("dp-cp", "dp", "edp")
        if topology.dist_opt_instances > 1:
            gloo += ("intra-dp-cp", "intra-edp")
    _default.claim(
        OWNER,
        topology,
        backends={"pp": pipeline_model_parallel_comm_backend},
        timeout=timedelta(minutes=distributed_timeout_minutes),
        gloo=gloo,
        strategy=strategy,
        independent=("dp-cp",) if create_all_gather_group else (),
        pg_options=options,
    )
    if virtual_pipeline_model_parallel_size is not None:
        _overrides["vpp_rank"] = 0
    if use_sharp:
        _options.enable_sharp(
            _groups(), "inter-edp" if sharp_enabled_group == "dp_replica" else "dp-cp"
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
    hybrid_context_parallel: bool,
    timeout_minutes: object,
    create_gloo_process_groups: object,
    create_all_gather_group: object,
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
    if hybrid_context_parallel:
        raise TopologyError(
            "hybrid_context_parallel=True is not supported by this façade: its power-of-two "
            "sub-groups of the dp-cp group are no kind of topology.Topology; leave it False"
        )
    if type(timeout_minutes) is not int or timeout_minutes < 1:
        raise TopologyError(
            f"distributed_timeout_minutes must be a positive int, got {timeout_minutes!r}; e.g. 30"
        )
    for name, flag in (
        ("create_gloo_process_groups", create_gloo_process_groups),
        ("create_all_gather_group", create_all_gather_group),
    ):
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
) -> Topology:
    """The Topology Megatron's arguments describe, over the whole default group.

    Sizes Megatron rejects with ``RuntimeError`` raise :class:`FacadeRuntimeError`; every other
    rejection of the core is a :class:`FacadeAssertionError` (Megatron asserts, or fails later).
    """
    world = dist.get_world_size()
    _runtime_checks(world, tp, pp, vpp, cp, ep, etp, order)
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
) -> None:
    """Megatron's own ``RuntimeError`` cases, with the arithmetic."""
    if not all(type(v) is int and v >= 1 for v in (tp, pp, cp, ep)):
        return  # the core names the bad size
    tp, pp, cp, ep = cast("tuple[int, int, int, int]", (tp, pp, cp, ep))
    model = tp * pp * cp
    if world % model:
        raise FacadeRuntimeError(
            f"world_size ({world}) is not divisible by tp({tp}) * pp({pp}) * cp({cp}) = {model}"
        )
    if vpp is not None and pp <= 1:
        raise FacadeRuntimeError(
            f"virtual_pipeline_model_parallel_size={vpp!r} needs pipeline_model_parallel_size "
            f"> 1 (the interleaved schedule), got pp({pp})"
        )
    expert_tp = tp if etp is None else etp
    if type(expert_tp) is int and expert_tp >= 1 and world % (expert_tp * ep * pp):
        raise FacadeRuntimeError(
            f"world_size ({world}) is not divisible by etp({expert_tp}) * ep({ep}) * pp({pp}) "
            f"= {expert_tp * ep * pp}"
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


def install() -> None:
    """Make Megatron's own ``parallel_state`` build and answer with this façade's groups.

    After it, ``megatron.core.parallel_state.initialize_model_parallel(...)`` (as Megatron's
    training setup calls it) creates our deduplicated groups with the ``local`` strategy and
    fills Megatron's module globals with them, so every getter in every Megatron module answers
    with our groups until ``destroy_model_parallel()``. Idempotent; :func:`uninstall` undoes it.

    >>> from topology_torch.compat import megatron  # doctest: +SKIP
    >>> megatron.install()  # doctest: +SKIP
    >>> from megatron.core import parallel_state  # doctest: +SKIP
    >>> parallel_state.initialize_model_parallel(2, 4)  # our groups  # doctest: +SKIP

    Raises:
        TopologyError: megatron-core (0.16) is not installed.
    """
    _install.install(sys.modules[__name__])


def uninstall() -> None:
    """Put Megatron's own ``initialize_model_parallel``/``destroy_model_parallel`` back.

    Raises:
        FacadeAssertionError: the installed groups are still alive; destroy them first.
    """
    _install.uninstall()


def is_installed() -> bool:
    """Whether :func:`install` is in effect."""
    return _install.is_installed()


def destroy_model_parallel() -> None:
    """Destroy every group ``initialize_model_parallel`` made (a no-op when none) and clear the
    ``set_*`` overrides.

    Raises:
        TopologyError: the default groups were made by another façade (they are left alone).
    """
    _default.release(OWNER)
    _overrides.update(dict.fromkeys(_OVERRIDES))


def model_parallel_is_initialized() -> bool:
    """Whether this façade's groups exist."""
    return _default.held_by(OWNER) is not None


def is_initialized() -> bool:
    """Whether this façade's groups exist (Megatron: the data-parallel group exists)."""
    return _default.held_by(OWNER) is not None


def is_unitialized() -> bool:
    """Megatron's (deprecated) spelling of ``not is_initialized()``."""
    warnings.warn(
        "is_unitialized is deprecated, use is_initialized instead", DeprecationWarning, stacklevel=2
    )
    return _default.held_by(OWNER) is None


def has_separate_all_gather_group() -> bool:
    """Whether ``create_all_gather_group=True`` made a second ``dp-cp`` communicator."""
    groups = _default.held_by(OWNER)
    return groups is not None and groups.has_independent("dp-cp")


def _groups() -> ProcessGroups:
    return owned_groups(OWNER)


def _group(kind: str, check_initialized: bool = True) -> Any:
    if not check_initialized and not is_initialized():
        return None
    groups = _groups()
    if kind not in groups.kinds:  # a kind Megatron leaves None for this layout
        if check_initialized:
            raise NotInitializedError(
                f"the {kind} group is not initialized: {groups.topology} has no such kind"
            )
        return None
    if not groups.has_group(kind):
        if check_initialized:
            raise NotInitializedError(
                f"rank {groups.global_rank} holds no {kind} group of {groups.topology}"
            )
        return None
    return groups.group(kind)


def _dp_kind(with_context_parallel: bool, partial_data_parallel: bool) -> str:
    if partial_data_parallel:
        if not with_context_parallel:
            raise FacadeAssertionError(
                "partial_data_parallel=True needs with_context_parallel=True, as in Megatron "
                "(partial DP for the optimizer includes CP)"
            )
        return "intra-dp-cp" if topology_of(_groups()).dist_opt_instances > 1 else "dp-cp"
    return "dp-cp" if with_context_parallel else "dp"


def _edp_kind(partial: bool) -> str:
    return "intra-edp" if partial and topology_of(_groups()).dist_opt_instances > 1 else "edp"


def _dist_ready() -> bool:
    return dist.is_available() and dist.is_initialized()


# -- groups -----------------------------------------------------------------------------------


def get_tensor_model_parallel_group(check_initialized: bool = True) -> Any:
    """The tensor-parallel group of this rank."""
    return _group("tp", check_initialized)


def get_pipeline_model_parallel_group(check_initialized: bool = True) -> Any:
    """The pipeline group of this rank."""
    return _group("pp", check_initialized)


def get_model_parallel_group(check_initialized: bool = True) -> Any:
    """The model-parallel group (tp and pp) of this rank."""
    return _group("tp-pp", check_initialized)


def get_data_parallel_group(
    with_context_parallel: bool = False,
    partial_data_parallel: bool = False,
    independent_all_gather: bool = False,
) -> Any:
    """The data-parallel group (with cp, or one distributed-optimizer instance's part).

    ``independent_all_gather=True`` (with cp, not partial) gives the second communicator
    ``create_all_gather_group=True`` made: the same ranks, its own progress.
    """
    kind = _dp_kind(with_context_parallel, partial_data_parallel)
    if with_context_parallel and not partial_data_parallel and independent_all_gather:
        groups = _groups()
        if not groups.has_independent("dp-cp"):
            raise NotInitializedError(
                "data parallel group with context parallel AG is not initialized; pass "
                "create_all_gather_group=True to initialize_model_parallel"
            )
        return groups.independent_group("dp-cp")
    return _group(kind)


def get_data_parallel_group_gloo(
    with_context_parallel: bool = False, partial_data_parallel: bool = False
) -> Any:
    """The gloo companion of the data-parallel group."""
    groups = _groups()
    kind = _dp_kind(with_context_parallel, partial_data_parallel)
    try:
        return groups.gloo_group(kind)
    except TopologyError as error:
        raise NotInitializedError(f"data parallel group-gloo is not initialized: {error}") from None


def get_context_parallel_group(check_initialized: bool = True) -> Any:
    """The context-parallel group of this rank."""
    return _group("cp", check_initialized)


def get_context_parallel_global_ranks(check_initialized: bool = True) -> list[int] | None:
    """The global ranks of this rank's context-parallel group."""
    if not check_initialized and not is_initialized():
        return None
    return list(_groups().ranks("cp"))


def get_hierarchical_context_parallel_groups(check_initialized: bool = True) -> list[Any] | None:
    """The hierarchical context-parallel groups, innermost level first (None without them)."""
    if not check_initialized and not is_initialized():
        return None
    groups = _groups()
    levels = [groups.group(k) for k in groups.kinds if k.startswith("hcp-")]
    if not levels and check_initialized:
        raise NotInitializedError(
            "hierarchical context parallel groups are not initialized; pass "
            "hierarchical_context_parallel_sizes to initialize_model_parallel"
        )
    return levels or None


def get_hybrid_data_context_parallel_groups(
    check_initialized: bool = True, group_size: int | None = None
) -> Any:
    """The ``dp-cp`` group when ``group_size`` is its size (hybrid sub-groups are not made).

    Raises:
        TopologyError: any other ``group_size`` (``hybrid_context_parallel`` is refused).
    """
    if group_size == get_data_parallel_world_size(with_context_parallel=True):
        return _group("dp-cp", check_initialized)
    raise TopologyError(
        f"hybrid data-context-parallel groups of size {group_size!r} do not exist: this façade "
        "refuses hybrid_context_parallel; group_size "
        f"{get_data_parallel_world_size(with_context_parallel=True)} gives the dp-cp group"
    )


def get_embedding_group(check_initialized: bool = True) -> Any:
    """The word-embedding group (first and last stage) of this rank."""
    return _group("embedding", check_initialized)


def get_position_embedding_group(check_initialized: bool = True) -> Any:
    """The position-embedding group (first stage) of this rank."""
    return _group("position-embedding", check_initialized)


def get_amax_reduction_group(
    with_context_parallel: bool = False, tp_only_amax_red: bool = False
) -> Any:
    """The FP8 amax reduction group: tp * dp (* cp), or with ``tp_only_amax_red`` tp (* cp)."""
    if with_context_parallel:
        return _group("tp-cp" if tp_only_amax_red else "tp-dp-cp")
    return _group("tp" if tp_only_amax_red else "tp-dp")


def get_tensor_and_data_parallel_group(
    check_initialized: bool = True, with_context_parallel: bool = False
) -> Any:
    """The tp * dp (* cp) group of this rank."""
    return _group("tp-dp-cp" if with_context_parallel else "tp-dp", check_initialized)


def get_tensor_and_context_parallel_group(check_initialized: bool = True) -> Any:
    """The tp * cp group of this rank."""
    return _group("tp-cp", check_initialized)


def get_expert_model_parallel_group(check_initialized: bool = True) -> Any:
    """The expert-parallel group of this rank."""
    return _group("ep", check_initialized)


def get_expert_tensor_parallel_group(check_initialized: bool = True) -> Any:
    """The expert tensor-parallel group of this rank."""
    return _group("etp", check_initialized)


def get_expert_tensor_and_model_parallel_group(check_initialized: bool = True) -> Any:
    """The etp * ep group of this rank."""
    return _group("etp-ep", check_initialized)


def get_expert_tensor_model_pipeline_parallel_group(check_initialized: bool = True) -> Any:
    """The etp * ep * pp group of this rank."""
    return _group("etp-ep-pp", check_initialized)


def get_expert_data_parallel_group(
    check_initialized: bool = True, partial_expert_data_parallel: bool = False
) -> Any:
    """The expert data-parallel group (or one distributed-optimizer instance's part)."""
    if not check_initialized and not is_initialized():
        return None
    return _group(_edp_kind(partial_expert_data_parallel), check_initialized)


def get_expert_data_parallel_group_gloo(partial_expert_data_parallel: bool = False) -> Any:
    """The gloo companion of the expert data-parallel group."""
    groups = _groups()
    try:
        return groups.gloo_group(_edp_kind(partial_expert_data_parallel))
    except TopologyError as error:
        raise NotInitializedError(
            f"expert data parallel group-gloo is not initialized: {error}"
        ) from None


def get_data_modulo_expert_parallel_group(partial_expert_data_parallel: bool = False) -> Any:
    """Megatron's older (deprecated) name of the expert data-parallel group."""
    warnings.warn(
        "get_data_modulo_expert_parallel_group is deprecated, please use "
        "get_expert_data_parallel_group instead.",
        DeprecationWarning,
        stacklevel=2,
    )
    return get_expert_data_parallel_group(partial_expert_data_parallel=partial_expert_data_parallel)


def get_intra_distributed_optimizer_instance_group(check_initialized: bool = True) -> Any:
    """All ranks of this rank's distributed-optimizer instance (every rank with one instance)."""
    if not check_initialized and not is_initialized():
        return None
    if topology_of(_groups()).dist_opt_instances == 1:
        return dist.group.WORLD  # Megatron's one instance group holds every rank
    return _group("intra-dist-opt", check_initialized)


def get_inter_distributed_optimizer_instance_group(check_initialized: bool = True) -> Any:
    """The ranks at this rank's position across distributed-optimizer instances."""
    return _group("inter-edp", check_initialized)


# -- sizes, ranks, sources, and Megatron's overrides of them --------------------------------------


def _override(name: str) -> int | None:
    return _overrides[name]


def _size(kind: str) -> int:
    """Megatron's ``group.size()`` for the size getters that answer 0 without torch.distributed."""
    return _groups().size(kind) if _dist_ready() else 0


def _rank(kind: str) -> int:
    return _groups().rank(kind) if _dist_ready() else 0


def set_tensor_model_parallel_world_size(world_size: int | None) -> None:
    """Make ``get_tensor_model_parallel_world_size`` answer ``world_size`` (None: the group)."""
    _overrides["tp_size"] = world_size


def set_tensor_model_parallel_rank(rank: int | None) -> None:
    """Make ``get_tensor_model_parallel_rank`` answer ``rank`` (None: the group)."""
    _overrides["tp_rank"] = rank


def set_pipeline_model_parallel_world_size(world_size: int | None) -> None:
    """Make ``get_pipeline_model_parallel_world_size`` answer ``world_size`` (None: the group)."""
    _overrides["pp_size"] = world_size


def set_pipeline_model_parallel_rank(rank: int | None) -> None:
    """Make ``get_pipeline_model_parallel_rank`` answer ``rank`` (None: the group)."""
    _overrides["pp_rank"] = rank


def set_virtual_pipeline_model_parallel_world_size(world_size: int | None) -> None:
    """Make ``get_virtual_pipeline_model_parallel_world_size`` answer ``world_size``."""
    _overrides["vpp_size"] = world_size


def set_data_parallel_rank(rank: int | None) -> None:
    """Make ``get_data_parallel_rank`` answer ``rank`` (None: the group)."""
    _overrides["dp_rank"] = rank


def set_expert_model_parallel_world_size(world_size: int | None) -> None:
    """Make ``get_expert_model_parallel_world_size`` answer ``world_size`` (None: the group)."""
    _overrides["ep_size"] = world_size


def set_expert_model_parallel_rank(rank: int | None) -> None:
    """Make ``get_expert_model_parallel_rank`` answer ``rank`` (None: the group)."""
    _overrides["ep_rank"] = rank


def set_expert_tensor_parallel_world_size(world_size: int | None) -> None:
    """Make ``get_expert_tensor_parallel_world_size`` answer ``world_size`` (None: the group)."""
    _overrides["etp_size"] = world_size


def set_expert_tensor_parallel_rank(rank: int | None) -> None:
    """Make ``get_expert_tensor_parallel_rank`` answer ``rank`` (None: the group)."""
    _overrides["etp_rank"] = rank


def get_tensor_model_parallel_world_size() -> int:
    """tp (or the value set by ``set_tensor_model_parallel_world_size``)."""
    value = _override("tp_size")
    return value if value is not None else _groups().size("tp")


def get_tensor_model_parallel_rank() -> int:
    """This rank's position in its tensor-parallel group (or the value set)."""
    value = _override("tp_rank")
    return value if value is not None else _groups().rank("tp")


def get_tensor_model_parallel_src_rank() -> int:
    """The global rank of position 0 in this rank's tensor-parallel group."""
    return _groups().ranks("tp")[0]


def get_model_parallel_src_rank() -> int:
    """The global rank of position 0 in this rank's model-parallel group."""
    return _groups().ranks("tp-pp")[0]


def get_pipeline_model_parallel_world_size() -> int:
    """pp (or the value set by ``set_pipeline_model_parallel_world_size``)."""
    value = _override("pp_size")
    return value if value is not None else _groups().size("pp")


def get_pipeline_model_parallel_rank() -> int:
    """This rank's pipeline stage (or the value set)."""
    value = _override("pp_rank")
    return value if value is not None else _groups().rank("pp")


def get_data_parallel_world_size(
    with_context_parallel: bool = False, partial_data_parallel: bool = False
) -> int:
    """dp (times cp; or one distributed-optimizer instance's part); 0 without torch.distributed."""
    value = _override("dp_size")
    if value is not None:
        return value
    if not _dist_ready():
        return 0
    return _groups().size(_dp_kind(with_context_parallel, partial_data_parallel))


def get_data_parallel_rank(
    with_context_parallel: bool = False, partial_data_parallel: bool = False
) -> int:
    """This rank's position in its data-parallel group (or the value set); 0 without
    torch.distributed."""
    value = _override("dp_rank")
    if value is not None:
        return value
    if not _dist_ready():
        return 0
    return _groups().rank(_dp_kind(with_context_parallel, partial_data_parallel))


def get_data_parallel_src_rank(with_context_parallel: bool = False) -> int:
    """The global rank of position 0 in this rank's data-parallel group."""
    return _groups().ranks(_dp_kind(with_context_parallel, False))[0]


def get_context_parallel_world_size() -> int:
    """cp; 0 without torch.distributed."""
    return _size("cp")


def get_context_parallel_rank() -> int:
    """This rank's position in its context-parallel group; 0 without torch.distributed."""
    return _rank("cp")


def get_tensor_and_context_parallel_world_size() -> int:
    """tp * cp; 0 without torch.distributed."""
    return _size("tp-cp")


def get_tensor_and_context_parallel_rank() -> int:
    """This rank's position in its tp * cp group; 0 without torch.distributed."""
    return _rank("tp-cp")


def get_expert_model_parallel_world_size() -> int:
    """ep (or the value set); 0 without torch.distributed."""
    value = _override("ep_size")
    return value if value is not None else _size("ep")


def get_expert_model_parallel_rank() -> int:
    """This rank's position in its expert-parallel group (or the value set)."""
    value = _override("ep_rank")
    return value if value is not None else _rank("ep")


def get_expert_model_parallel_src_rank() -> int:
    """The global rank of position 0 in this rank's expert-parallel group."""
    return _groups().ranks("ep")[0]


def get_expert_tensor_parallel_world_size() -> int | None:
    """etp (or the value set; before initialization, the tensor-parallel value set)."""
    value = _override("etp_size")
    if value is not None:
        return value
    if not is_initialized():
        return _override("tp_size")
    return _groups().size("etp")


def get_expert_tensor_parallel_rank() -> int | None:
    """This rank's position in its expert tensor-parallel group (or the value set; before
    initialization, the tensor-parallel rank set)."""
    value = _override("etp_rank")
    if value is not None:
        return value
    if not is_initialized():
        return _override("tp_rank")
    return _groups().rank("etp")


def get_expert_tensor_and_model_parallel_world_size() -> int:
    """etp * ep; 0 without torch.distributed."""
    return _size("etp-ep")


def get_expert_tensor_and_model_parallel_rank() -> int:
    """This rank's position in its etp * ep group; 0 without torch.distributed."""
    return _rank("etp-ep")


def get_expert_data_parallel_world_size(partial_expert_data_parallel: bool = False) -> int:
    """edp (or one distributed-optimizer instance's part); 0 without torch.distributed."""
    return _size(_edp_kind(partial_expert_data_parallel)) if _dist_ready() else 0


def get_expert_data_parallel_rank(partial_expert_data_parallel: bool = False) -> int:
    """This rank's position in its expert data-parallel group; 0 without torch.distributed."""
    return _rank(_edp_kind(partial_expert_data_parallel)) if _dist_ready() else 0


def get_all_ranks() -> str:
    """This rank's tp, dp, cp, pp and ep positions joined by ``_`` (Megatron's log tag)."""
    ranks = [
        get_tensor_model_parallel_rank(),
        get_data_parallel_rank(),
        get_context_parallel_rank(),
        get_pipeline_model_parallel_rank(),
        get_expert_model_parallel_rank(),
    ]
    return "_".join(str(r or 0) for r in ranks)


# -- pipeline -----------------------------------------------------------------------------------


def _pipeline_ranks() -> tuple[int, ...]:
    return _groups().ranks("pp")


def get_pipeline_model_parallel_first_rank() -> int:
    """The global rank of this pipeline's first stage."""
    return _pipeline_ranks()[0]


def get_pipeline_model_parallel_last_rank() -> int:
    """The global rank of this pipeline's last stage."""
    return _pipeline_ranks()[get_pipeline_model_parallel_world_size() - 1]


def get_pipeline_model_parallel_next_rank() -> int:
    """The global rank of the next stage (the last stage's next is the first)."""
    ranks = _pipeline_ranks()
    size = get_pipeline_model_parallel_world_size()
    return ranks[(get_pipeline_model_parallel_rank() + 1) % size]


def get_pipeline_model_parallel_prev_rank() -> int:
    """The global rank of the previous stage (the first stage's previous is the last)."""
    ranks = _pipeline_ranks()
    size = get_pipeline_model_parallel_world_size()
    return ranks[(get_pipeline_model_parallel_rank() - 1) % size]


def get_virtual_pipeline_model_parallel_world_size() -> int | None:
    """vpp (or the value set; None without virtual stages or before initialization)."""
    value = _override("vpp_size")
    if value is not None:
        return value
    groups = _default.held_by(OWNER)
    return None if groups is None else topology_of(groups).vpp


def get_virtual_pipeline_model_parallel_rank() -> int | None:
    """The current virtual stage (Megatron's global; prefer passing ``vp_stage``)."""
    return _override("vpp_rank")


def set_virtual_pipeline_model_parallel_rank(rank: int | None) -> None:
    """Set the current virtual stage (Megatron's global, deprecated: pass ``vp_stage``)."""
    warnings.warn(
        "set_virtual_pipeline_model_parallel_rank in global scope is deprecated. "
        "Pass vp_stage explicitly to is_pipeline_first_stage, is_pipeline_last_stage, etc.",
        DeprecationWarning,
        stacklevel=2,
    )
    _overrides["vpp_rank"] = rank


def _virtual(ignore_virtual: bool, vp_stage: int | None) -> int | None:
    """The virtual pipeline size when ``vp_stage`` must be checked, else None."""
    vpp = get_virtual_pipeline_model_parallel_world_size()
    if ignore_virtual or vpp is None:
        return None
    if vp_stage is None:
        raise FacadeAssertionError(
            "vp_stage must be passed when virtual pipeline stages are enabled "
            "(vpp is set); e.g. is_pipeline_first_stage(ignore_virtual=False, vp_stage=0)"
        )
    return vpp


def is_pipeline_first_stage(ignore_virtual: bool = True, vp_stage: int | None = None) -> bool:
    """Whether this rank is the first stage (and ``vp_stage`` the first virtual chunk)."""
    if _virtual(ignore_virtual, vp_stage) is not None and vp_stage != 0:
        return False
    return get_pipeline_model_parallel_rank() == 0


def is_pipeline_last_stage(ignore_virtual: bool = True, vp_stage: int | None = None) -> bool:
    """Whether this rank is the last stage (and ``vp_stage`` the last virtual chunk)."""
    vpp = _virtual(ignore_virtual, vp_stage)
    if vpp is not None and vp_stage != vpp - 1:
        return False
    return get_pipeline_model_parallel_rank() == get_pipeline_model_parallel_world_size() - 1


def is_rank_in_embedding_group(ignore_virtual: bool = True, vp_stage: int | None = None) -> bool:
    """Whether this rank holds word embeddings (in virtual chunk ``vp_stage``)."""
    groups = _default.held_by(OWNER)
    if groups is None or "embedding" not in groups.kinds:
        return False
    if not groups.has_group("embedding"):
        return False
    if ignore_virtual:
        return True
    ranks = groups.ranks("embedding")
    if groups.global_rank == ranks[0]:
        return is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage)
    if groups.global_rank == ranks[-1]:
        return is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage)
    return True


def is_rank_in_position_embedding_group() -> bool:
    """Whether this rank holds position embeddings."""
    groups = _default.held_by(OWNER)
    if groups is None or "position-embedding" not in groups.kinds:
        return False
    return groups.has_group("position-embedding")


def default_embedding_ranks(pp_ranks: list[int]) -> list[int]:
    """Megatron's default word-embedding stages of one pipeline: the first and the last."""
    return [pp_ranks[0]] if len(pp_ranks) == 1 else [pp_ranks[0], pp_ranks[-1]]


def default_position_embedding_ranks(pp_ranks: list[int]) -> list[int]:
    """Megatron's default position-embedding stage of one pipeline: the first."""
    return [pp_ranks[0]]


def get_nccl_options(pg_name: str, nccl_comm_cfgs: dict[str, dict[str, Any]]) -> Any:
    """Megatron's ``ProcessGroupNCCL.Options`` for group ``pg_name`` (None when not configured)."""
    if pg_name not in nccl_comm_cfgs:
        return None
    return _options.nccl_options(
        _options._checked({pg_name: nccl_comm_cfgs[pg_name]}, "config")[pg_name]
    )


def overwrite_nccl_comm_cfgs(
    nccl_comm_cfgs: dict[str, dict[str, Any]], pg_name: str, key_value_pair: tuple[str, Any]
) -> None:
    """Set one setting of group ``pg_name`` in a Megatron NCCL config, in place."""
    nccl_comm_cfgs.setdefault(pg_name, {})[key_value_pair[0]] = key_value_pair[1]


def __getattr__(name: str) -> Any:
    """Megatron's module globals (``_MODEL_PARALLEL_GROUP`` ...), read from our state.

    Read-only views for code and tests that inspect them; None when Megatron's would be None.
    """
    view = GLOBALS.get(name)
    if view is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return view(_default.held_by(OWNER), _overrides)


# -- Megatron-core's ProcessGroupCollection ------------------------------------------------------

_COLLECTION_FIELDS = {
    "tp": "tp",
    "pp": "pp",
    "mp": "tp-pp",
    "embd": "embedding",
    "pos_embd": "position-embedding",
    "cp": "cp",
    "tp_cp": "tp-cp",
    "ep": "ep",
    "expt_tp": "etp",
    "tp_ep": "etp-ep",
    "tp_ep_pp": "etp-ep-pp",
    "tp_dp_cp": "tp-dp-cp",
    "dp": "dp",
    "dp_cp": "dp-cp",
    "expt_dp": "edp",
    "intra_dp_cp": "intra-dp-cp",
    "intra_expt_dp": "intra-edp",
    "inter_dist_opt": "inter-edp",
    "intra_dist_opt": "intra-dist-opt",
}


def process_group_collection(groups: ProcessGroups | None = None) -> Any:
    """Megatron-core's ``ProcessGroupCollection`` holding our groups (needs megatron-core).

    Every field whose kind was created and holds this rank is set (``hcp`` as a list of levels);
    no new group is made. ``groups`` defaults to the initialized default.

    Raises:
        TopologyError: megatron-core is not installed, or nothing is initialized.
    """
    try:
        from megatron.core.process_groups_config import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
            ProcessGroupCollection,
        )
    except ImportError as error:
        raise TopologyError(
            "process_group_collection needs megatron-core; install it with "
            "pip install --no-deps megatron-core"
        ) from error
    groups = groups if groups is not None else _groups()
    fields: dict[str, Any] = {}
    for field, kind in _COLLECTION_FIELDS.items():
        if kind in groups.kinds and groups.has_group(kind):
            fields[field] = groups.group(kind)
    levels = [k for k in groups.kinds if k.startswith("hcp-")]
    if levels:
        fields["hcp"] = [groups.group(k) for k in levels]
    return ProcessGroupCollection(**fields)
