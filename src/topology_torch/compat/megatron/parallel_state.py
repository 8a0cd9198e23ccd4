"""Megatron-core's ``parallel_state`` getters and setters over the façade's groups.

The union of megatron-core 0.16.1 to 0.19.2's API: 0.16's positional order, with 0.19's new
switches by keyword (``with_gtp_remat`` on the data-parallel getters, ``with_egtp_remat``),
0.19's GTP getters and ``create_all_gather_groups``, and the names later versions removed
(``get_data_modulo_expert_parallel_group``, ``is_unitialized``,
``has_separate_all_gather_group``, ``independent_all_gather``). Without GTP (gtp 1) every
``with_gtp_remat`` variant is the plain group, as in Megatron.
"""

from __future__ import annotations

import warnings
from datetime import timedelta
from typing import Any

import attrs
import torch.distributed as dist

from topology import TopologyError

from ... import _default
from ..._process_groups import ProcessGroups
from .._errors import FacadeAssertionError, FacadeRuntimeError, NotInitializedError, topology_of
from . import _hybrid, _options
from ._initialize import destroy_model_parallel, initialize_model_parallel
from ._rank_generator import RankGenerator, generate_masked_orthogonal_rank_groups
from ._state import (
    OWNER,
    extra_groups,
    is_initialized,
    model_parallel_is_initialized,
    overrides,
    singleton,
)
from ._state import dist_ready as _dist_ready
from ._state import dp_kind as _dp_kind
from ._state import edp_kind as _edp_kind
from ._state import group as _group
from ._state import groups as _groups
from ._state import override as _override
from ._state import rank as _rank
from ._state import size as _size

__all__ = [
    "RankGenerator",
    "create_all_gather_groups",
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
    "get_dynamic_data_context_parallel_groups",
    "get_embedding_group",
    "get_expert_data_parallel_group",
    "get_expert_data_parallel_group_gloo",
    "get_expert_data_parallel_rank",
    "get_expert_data_parallel_world_size",
    "get_expert_gtp_weight_remat_global_ranks",
    "get_expert_gtp_weight_remat_group",
    "get_expert_gtp_weight_remat_rank",
    "get_expert_gtp_weight_remat_world_size",
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
    "get_gtp_weight_remat_global_ranks",
    "get_gtp_weight_remat_group",
    "get_gtp_weight_remat_rank",
    "get_gtp_weight_remat_world_size",
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
    "is_initialized",
    "is_pipeline_first_stage",
    "is_pipeline_last_stage",
    "is_rank_in_embedding_group",
    "is_rank_in_position_embedding_group",
    "is_unitialized",
    "model_parallel_is_initialized",
    "overwrite_nccl_comm_cfgs",
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
]


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
    *,
    with_gtp_remat: bool = True,
) -> Any:
    """The data-parallel group (with cp, times gtp, or one distributed-optimizer instance's part).

    ``with_gtp_remat`` (0.19, default True) widens it by the GTP axis where gtp > 1;
    ``independent_all_gather=True`` (0.16/0.17; with cp, not partial) gives the second
    communicator ``create_all_gather_group=True`` made: the same ranks, its own progress.
    """
    kind = _dp_kind(with_context_parallel, partial_data_parallel, with_gtp_remat)
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
    kind = _dp_kind(with_context_parallel, partial_data_parallel, False)
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
    """This rank's hybrid (dynamic) context-parallel group of ``group_size`` ranks: the dp-cp
    group when that is its size, else the block of ``group_size`` consecutive members of it
    that holds this rank (``hybrid_context_parallel=True``; made on first use when lazy).

    Raises:
        FacadeKeyError: a size Megatron makes no group of, or hybrid context parallelism off
            (Megatron's ``KeyError``).
    """
    if group_size == get_data_parallel_world_size(with_context_parallel=True):
        return _group("dp-cp", check_initialized)
    return _hybrid.group(group_size)


def get_dynamic_data_context_parallel_groups(
    check_initialized: bool = True, group_size: int | None = None
) -> Any:
    """Megatron's dev-branch name of :func:`get_hybrid_data_context_parallel_groups`."""
    return get_hybrid_data_context_parallel_groups(check_initialized, group_size)


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


def get_expert_tensor_model_pipeline_parallel_group(
    check_initialized: bool = True, with_egtp_remat: bool = False
) -> Any:
    """The etp * ep * pp group of this rank (``with_egtp_remat``: times egtp where egtp > 1)."""
    held = _default.held_by(OWNER)
    if with_egtp_remat and held is not None and "etp-ep-egtp-pp" in held.kinds:
        return _group("etp-ep-egtp-pp", check_initialized)
    return _group("etp-ep-pp", check_initialized)


def get_expert_data_parallel_group(
    check_initialized: bool = True,
    partial_expert_data_parallel: bool = False,
    *,
    with_gtp_remat: bool = True,
) -> Any:
    """The expert data-parallel group (times egtp where egtp > 1, or one distributed-optimizer
    instance's part)."""
    if not check_initialized and not is_initialized():
        return None
    return _group(_edp_kind(partial_expert_data_parallel, with_gtp_remat), check_initialized)


def get_expert_data_parallel_group_gloo(partial_expert_data_parallel: bool = False) -> Any:
    """The gloo companion of the expert data-parallel group."""
    groups = _groups()
    try:
        return groups.gloo_group(_edp_kind(partial_expert_data_parallel, False))
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
    return get_expert_data_parallel_group(
        with_gtp_remat=False, partial_expert_data_parallel=partial_expert_data_parallel
    )


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


def set_tensor_model_parallel_world_size(world_size: int | None) -> None:
    """Make ``get_tensor_model_parallel_world_size`` answer ``world_size`` (None: the group)."""
    overrides["tp_size"] = world_size


def set_tensor_model_parallel_rank(rank: int | None) -> None:
    """Make ``get_tensor_model_parallel_rank`` answer ``rank`` (None: the group)."""
    overrides["tp_rank"] = rank


def set_pipeline_model_parallel_world_size(world_size: int | None) -> None:
    """Make ``get_pipeline_model_parallel_world_size`` answer ``world_size`` (None: the group)."""
    overrides["pp_size"] = world_size


def set_pipeline_model_parallel_rank(rank: int | None) -> None:
    """Make ``get_pipeline_model_parallel_rank`` answer ``rank`` (None: the group)."""
    overrides["pp_rank"] = rank


def set_virtual_pipeline_model_parallel_world_size(world_size: int | None) -> None:
    """Make ``get_virtual_pipeline_model_parallel_world_size`` answer ``world_size``."""
    overrides["vpp_size"] = world_size


def set_data_parallel_rank(rank: int | None) -> None:
    """Make ``get_data_parallel_rank`` answer ``rank`` (None: the group)."""
    overrides["dp_rank"] = rank


def set_expert_model_parallel_world_size(world_size: int | None) -> None:
    """Make ``get_expert_model_parallel_world_size`` answer ``world_size`` (None: the group)."""
    overrides["ep_size"] = world_size


def set_expert_model_parallel_rank(rank: int | None) -> None:
    """Make ``get_expert_model_parallel_rank`` answer ``rank`` (None: the group)."""
    overrides["ep_rank"] = rank


def set_expert_tensor_parallel_world_size(world_size: int | None) -> None:
    """Make ``get_expert_tensor_parallel_world_size`` answer ``world_size`` (None: the group)."""
    overrides["etp_size"] = world_size


def set_expert_tensor_parallel_rank(rank: int | None) -> None:
    """Make ``get_expert_tensor_parallel_rank`` answer ``rank`` (None: the group)."""
    overrides["etp_rank"] = rank


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
    with_context_parallel: bool = False,
    partial_data_parallel: bool = False,
    *,
    with_gtp_remat: bool = True,
) -> int:
    """dp (times cp, times gtp; or one distributed-optimizer instance's part); 0 without
    torch.distributed."""
    value = _override("dp_size")
    if value is not None:
        return value
    if not _dist_ready():
        return 0
    return _groups().size(_dp_kind(with_context_parallel, partial_data_parallel, with_gtp_remat))


def get_data_parallel_rank(
    with_context_parallel: bool = False,
    partial_data_parallel: bool = False,
    *,
    with_gtp_remat: bool = True,
) -> int:
    """This rank's position in its data-parallel group (or the value set); 0 without
    torch.distributed."""
    value = _override("dp_rank")
    if value is not None:
        return value
    if not _dist_ready():
        return 0
    return _groups().rank(_dp_kind(with_context_parallel, partial_data_parallel, with_gtp_remat))


def get_data_parallel_src_rank(with_context_parallel: bool = False) -> int:
    """The global rank of position 0 in this rank's data-parallel group."""
    return _groups().ranks(_dp_kind(with_context_parallel, False, False))[0]


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


def get_expert_data_parallel_world_size(
    partial_expert_data_parallel: bool = False, *, with_gtp_remat: bool = True
) -> int:
    """edp (times egtp; or one distributed-optimizer instance's part); 0 without
    torch.distributed."""
    if not _dist_ready():
        return 0
    return _size(_edp_kind(partial_expert_data_parallel, with_gtp_remat))


def get_expert_data_parallel_rank(
    partial_expert_data_parallel: bool = False, *, with_gtp_remat: bool = True
) -> int:
    """This rank's position in its expert data-parallel group; 0 without torch.distributed."""
    if not _dist_ready():
        return 0
    return _rank(_edp_kind(partial_expert_data_parallel, with_gtp_remat))


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
    overrides["vpp_rank"] = rank


def _checked_vp_stage(vp_stage: int | None) -> None:
    """Refuse a ``vp_stage`` that is no virtual stage, as the core does (``Topology
    .is_first_stage``): None, or an int (not a bool) in ``range(vpp)``, ``range(1)`` without
    virtual stages; ``vpp`` is the one in force (``set_virtual_pipeline_model_parallel_world_size``
    wins). Megatron ignores a bad one; this façade names it.

    Raises:
        TopologyError: ``vp_stage`` out of range or not an int.
    """
    groups = _default.held_by(OWNER)
    if vp_stage is None or groups is None:
        return
    topology = topology_of(groups)
    vpp = get_virtual_pipeline_model_parallel_world_size()
    if vpp != topology.vpp:
        topology = attrs.evolve(topology, vpp=vpp)
    topology.is_first_stage(topology.rank_offset, vp_stage)


def _virtual(ignore_virtual: bool, vp_stage: int | None) -> int | None:
    """The virtual pipeline size when ``vp_stage`` must be checked, else None."""
    _checked_vp_stage(vp_stage)
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
    _checked_vp_stage(vp_stage)
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
        _options.checked_configs({pg_name: nccl_comm_cfgs[pg_name]}, "config")[pg_name]
    )


def overwrite_nccl_comm_cfgs(
    nccl_comm_cfgs: dict[str, dict[str, Any]], pg_name: str, key_value_pair: tuple[str, Any]
) -> None:
    """Set one setting of group ``pg_name`` in a Megatron NCCL config, in place."""
    nccl_comm_cfgs.setdefault(pg_name, {})[key_value_pair[0]] = key_value_pair[1]


# -- Megatron 0.19's generalized tensor parallelism (GTP) --------------------------------------


def _gtp_group(kind: str, check_initialized: bool) -> Any:
    """This rank's ``kind`` group (``gtp``, ``egtp``); at size 1 the group of this rank alone."""
    if not check_initialized and not is_initialized():
        return None
    return _group(kind, check_initialized) if kind in _groups().kinds else singleton()


def _gtp_ranks(kind: str, check_initialized: bool) -> list[int] | None:
    if not check_initialized and not is_initialized():
        return None
    groups = _groups()
    return list(groups.ranks(kind)) if kind in groups.kinds else [groups.global_rank]


def get_gtp_weight_remat_group(check_initialized: bool = True) -> Any:
    """The GTP weight-sharding group of this rank (this rank alone when gtp is 1)."""
    return _gtp_group("gtp", check_initialized)


def get_gtp_weight_remat_world_size() -> int:
    """gtp; 0 before initialization or without torch.distributed."""
    if not _dist_ready() or not is_initialized():
        return 0
    return _groups().size("gtp") if "gtp" in _groups().kinds else 1


def get_gtp_weight_remat_rank() -> int:
    """This rank's position in its GTP group; 0 before initialization."""
    if not _dist_ready() or not is_initialized():
        return 0
    return _groups().rank("gtp") if "gtp" in _groups().kinds else 0


def get_gtp_weight_remat_global_ranks(check_initialized: bool = True) -> list[int] | None:
    """The global ranks of this rank's GTP group."""
    return _gtp_ranks("gtp", check_initialized)


def get_expert_gtp_weight_remat_group(check_initialized: bool = True) -> Any:
    """The expert GTP weight-sharding group of this rank (this rank alone when egtp is 1)."""
    return _gtp_group("egtp", check_initialized)


def get_expert_gtp_weight_remat_world_size() -> int:
    """egtp; 0 before initialization or without torch.distributed."""
    if not _dist_ready() or not is_initialized():
        return 0
    return _groups().size("egtp") if "egtp" in _groups().kinds else 1


def get_expert_gtp_weight_remat_rank() -> int:
    """This rank's position in its expert GTP group; 0 before initialization."""
    if not _dist_ready() or not is_initialized():
        return 0
    return _groups().rank("egtp") if "egtp" in _groups().kinds else 0


def get_expert_gtp_weight_remat_global_ranks(check_initialized: bool = True) -> list[int] | None:
    """The global ranks of this rank's expert GTP group."""
    return _gtp_ranks("egtp", check_initialized)


def create_all_gather_groups(
    for_expert_parallelism: bool = False,
    timeout: timedelta | None = None,
    nccl_comm_cfgs: dict[str, dict[str, Any]] | None = None,
) -> tuple[Any, Any]:
    """Second communicators of the ``dp-cp`` (and, with ep > 1, ``edp``) ranks, for AG/RS overlap.

    Megatron 0.18's replacement of ``create_all_gather_group=True``: returns ``(dp_cp_ag,
    expt_dp_ag)``, ``expt_dp_ag`` None unless ``for_expert_parallelism`` and ep > 1. The groups
    live until ``destroy_model_parallel``. SPMD contract: call on every rank, with equal
    arguments, in the same order.

    Raises:
        FacadeRuntimeError: nothing is initialized (Megatron's RuntimeError).
    """
    if not is_initialized():
        raise FacadeRuntimeError(
            "create_all_gather_groups() requires parallel state to be initialized; call "
            "initialize_model_parallel() first"
        )
    topology = topology_of(_groups())
    kinds = ("dp-cp", "edp") if for_expert_parallelism and topology.ep > 1 else ("dp-cp",)
    configs = _options.checked_configs(nccl_comm_cfgs or {}, "nccl_comm_cfgs")
    options = _options.pg_options(configs, topology, str(dist.get_backend()), None)
    made = extra_groups(
        ProcessGroups.create(
            topology,
            kinds=kinds,
            gloo=(),
            timeout=timeout,
            independent=kinds,
            pg_options={k: v for k, v in options.items() if k in kinds},
        )
    )
    expert = made.independent_group("edp") if "edp" in kinds else None
    return made.independent_group("dp-cp"), expert
