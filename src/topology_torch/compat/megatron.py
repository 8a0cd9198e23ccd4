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

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from topology import Topology, TopologyError

from .. import _default
from .._process_groups import ProcessGroups, refuse, require_initialized

__all__ = [
    "destroy_model_parallel",
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
    "get_inter_distributed_optimizer_instance_group",
    "get_intra_distributed_optimizer_instance_group",
    "get_model_parallel_group",
    "get_model_parallel_src_rank",
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
    "initialize_model_parallel",
    "is_initialized",
    "is_pipeline_first_stage",
    "is_pipeline_last_stage",
    "is_rank_in_embedding_group",
    "is_rank_in_position_embedding_group",
    "is_unitialized",
    "model_parallel_is_initialized",
    "process_group_collection",
    "set_virtual_pipeline_model_parallel_rank",
]

OWNER = _default.Owner("compat.megatron", "initialize_model_parallel()", "destroy_model_parallel()")
_virtual_rank: int | None = None


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
    expert_model_parallel_size: int = 1,
    num_distributed_optimizer_instances: int = 1,
    expert_tensor_parallel_size: int | None = None,
    nccl_communicator_config_path: str | None = None,
    distributed_timeout_minutes: int = 30,
    order: str = "tp-cp-ep-dp-pp",
    get_embedding_ranks: Callable[[list[int]], list[int]] | None = None,
    get_position_embedding_ranks: Callable[[list[int]], list[int]] | None = None,
    create_gloo_process_groups: bool = True,
    *,
    strategy: str = "auto",
) -> None:
    """Create Megatron's groups for the whole default group (see the module docstring).

    ``use_sharp`` and ``nccl_communicator_config_path`` are NCCL tuning Megatron applies; they
    are refused here rather than silently ignored. ``strategy`` is ours
    (see ``ProcessGroups.create``).

    Raises:
        TopologyError: invalid sizes (with the arithmetic), unsupported options, or an existing
            initialization.
    """
    global _virtual_rank
    require_initialized("initialize_model_parallel")
    try:
        if use_sharp or nccl_communicator_config_path is not None:
            raise TopologyError(
                "use_sharp and nccl_communicator_config_path are not supported by this façade; "
                "leave them at their defaults"
            )
        if type(distributed_timeout_minutes) is not int or distributed_timeout_minutes < 1:
            raise TopologyError(
                f"distributed_timeout_minutes must be a positive int, got "
                f"{distributed_timeout_minutes!r}; e.g. 30"
            )
        if type(create_gloo_process_groups) is not bool:
            raise TopologyError(
                f"create_gloo_process_groups must be True or False, got "
                f"{create_gloo_process_groups!r}"
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
    except TopologyError as problem:
        refuse(problem)  # every rank hears of it, nobody waits
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
    )
    _virtual_rank = 0 if virtual_pipeline_model_parallel_size is not None else None


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
    """The Topology Megatron's arguments describe, over the whole default group."""
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
    topology = Topology(dist.get_world_size(), **sizes)
    embedding = _stages(topology, get_embedding_ranks, "get_embedding_ranks")
    position = _stages(topology, get_position_embedding_ranks, "get_position_embedding_ranks")
    if embedding is None and position is None:
        return topology
    if embedding is not None:
        sizes["embedding_stages"] = embedding
    if position is not None:
        sizes["position_embedding_stages"] = position
    return Topology(dist.get_world_size(), **sizes)


def destroy_model_parallel() -> None:
    """Destroy every group ``initialize_model_parallel`` made (a no-op when none).

    Raises:
        TopologyError: the default groups were made by another façade (they are left alone).
    """
    global _virtual_rank
    _default.release(OWNER)
    _virtual_rank = None


def model_parallel_is_initialized() -> bool:
    """Whether this façade's groups exist."""
    return _default.held_by(OWNER) is not None


def is_initialized() -> bool:
    """Whether this façade's groups exist (Megatron: the data-parallel group exists)."""
    return _default.held_by(OWNER) is not None


def is_unitialized() -> bool:
    """Megatron's spelling of ``not is_initialized()``."""
    return _default.held_by(OWNER) is None


def _groups() -> ProcessGroups:
    return _default.owned(OWNER)


def _group(kind: str, check_initialized: bool = True) -> Any:
    if not check_initialized and not is_initialized():
        return None
    groups = _groups()
    if not check_initialized and not groups.has_group(kind):
        return None
    return groups.group(kind)


def _dp_kind(with_context_parallel: bool, partial_data_parallel: bool) -> str:
    if partial_data_parallel:
        if not with_context_parallel:
            raise TopologyError(
                "partial_data_parallel=True needs with_context_parallel=True, as in Megatron"
            )
        return "intra-dp-cp"
    return "dp-cp" if with_context_parallel else "dp"


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
    """The data-parallel group (with cp, or one distributed-optimizer instance's part)."""
    return _group(_dp_kind(with_context_parallel, partial_data_parallel))


def get_data_parallel_group_gloo(
    with_context_parallel: bool = False, partial_data_parallel: bool = False
) -> Any:
    """The gloo companion of the data-parallel group."""
    return _groups().gloo_group(_dp_kind(with_context_parallel, partial_data_parallel))


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
    groups = _groups()
    levels = [k for k in groups.kinds if k.startswith("hcp-")]
    return [groups.group(k) for k in levels] or None


def get_embedding_group(check_initialized: bool = True) -> Any:
    """The word-embedding group (first and last stage) of this rank."""
    return _group("embedding", check_initialized)


def get_position_embedding_group(check_initialized: bool = True) -> Any:
    """The position-embedding group (first stage) of this rank."""
    return _group("position-embedding", check_initialized)


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
    return _group("intra-edp" if partial_expert_data_parallel else "edp", check_initialized)


def get_expert_data_parallel_group_gloo(partial_expert_data_parallel: bool = False) -> Any:
    """The gloo companion of the expert data-parallel group."""
    return _groups().gloo_group("intra-edp" if partial_expert_data_parallel else "edp")


def get_data_modulo_expert_parallel_group(partial_expert_data_parallel: bool = False) -> Any:
    """Megatron's older name of the expert data-parallel group."""
    return get_expert_data_parallel_group(partial_expert_data_parallel=partial_expert_data_parallel)


def get_intra_distributed_optimizer_instance_group(check_initialized: bool = True) -> Any:
    """All ranks of this rank's distributed-optimizer instance."""
    return _group("intra-dist-opt", check_initialized)


def get_inter_distributed_optimizer_instance_group(check_initialized: bool = True) -> Any:
    """The ranks at this rank's position across distributed-optimizer instances."""
    return _group("inter-edp", check_initialized)


# -- sizes, ranks, sources --------------------------------------------------------------------


def get_tensor_model_parallel_world_size() -> int:
    """tp."""
    return _groups().size("tp")


def get_tensor_model_parallel_rank() -> int:
    """This rank's position in its tensor-parallel group."""
    return _groups().rank("tp")


def get_tensor_model_parallel_src_rank() -> int:
    """The global rank of position 0 in this rank's tensor-parallel group."""
    return _groups().ranks("tp")[0]


def get_model_parallel_src_rank() -> int:
    """The global rank of position 0 in this rank's model-parallel group."""
    return _groups().ranks("tp-pp")[0]


def get_pipeline_model_parallel_world_size() -> int:
    """pp."""
    return _groups().size("pp")


def get_pipeline_model_parallel_rank() -> int:
    """This rank's pipeline stage."""
    return _groups().rank("pp")


def get_data_parallel_world_size(
    with_context_parallel: bool = False, partial_data_parallel: bool = False
) -> int:
    """dp (times cp; or the size of one distributed-optimizer instance's part)."""
    return _groups().size(_dp_kind(with_context_parallel, partial_data_parallel))


def get_data_parallel_rank(
    with_context_parallel: bool = False, partial_data_parallel: bool = False
) -> int:
    """This rank's position in its data-parallel group."""
    return _groups().rank(_dp_kind(with_context_parallel, partial_data_parallel))


def get_data_parallel_src_rank(with_context_parallel: bool = False) -> int:
    """The global rank of position 0 in this rank's data-parallel group."""
    return _groups().ranks(_dp_kind(with_context_parallel, False))[0]


def get_context_parallel_world_size() -> int:
    """cp."""
    return _groups().size("cp")


def get_context_parallel_rank() -> int:
    """This rank's position in its context-parallel group."""
    return _groups().rank("cp")


def get_tensor_and_context_parallel_world_size() -> int:
    """tp * cp."""
    return _groups().size("tp-cp")


def get_tensor_and_context_parallel_rank() -> int:
    """This rank's position in its tp * cp group."""
    return _groups().rank("tp-cp")


def get_expert_model_parallel_world_size() -> int:
    """ep."""
    return _groups().size("ep")


def get_expert_model_parallel_rank() -> int:
    """This rank's position in its expert-parallel group."""
    return _groups().rank("ep")


def get_expert_model_parallel_src_rank() -> int:
    """The global rank of position 0 in this rank's expert-parallel group."""
    return _groups().ranks("ep")[0]


def get_expert_tensor_parallel_world_size() -> int:
    """etp."""
    return _groups().size("etp")


def get_expert_tensor_parallel_rank() -> int:
    """This rank's position in its expert tensor-parallel group."""
    return _groups().rank("etp")


def get_expert_tensor_and_model_parallel_world_size() -> int:
    """etp * ep."""
    return _groups().size("etp-ep")


def get_expert_tensor_and_model_parallel_rank() -> int:
    """This rank's position in its etp * ep group."""
    return _groups().rank("etp-ep")


def get_expert_data_parallel_world_size(partial_expert_data_parallel: bool = False) -> int:
    """edp (or the size of one distributed-optimizer instance's part)."""
    return _groups().size("intra-edp" if partial_expert_data_parallel else "edp")


def get_expert_data_parallel_rank(partial_expert_data_parallel: bool = False) -> int:
    """This rank's position in its expert data-parallel group."""
    return _groups().rank("intra-edp" if partial_expert_data_parallel else "edp")


# -- pipeline -----------------------------------------------------------------------------------


def get_pipeline_model_parallel_first_rank() -> int:
    """The global rank of this pipeline's first stage."""
    groups = _groups()
    return groups.topology.pipeline(groups.global_rank).first


def get_pipeline_model_parallel_last_rank() -> int:
    """The global rank of this pipeline's last stage."""
    groups = _groups()
    return groups.topology.pipeline(groups.global_rank).last


def get_pipeline_model_parallel_next_rank() -> int:
    """The global rank of the next stage (the last stage's next is the first)."""
    groups = _groups()
    return groups.topology.pipeline(groups.global_rank).next


def get_pipeline_model_parallel_prev_rank() -> int:
    """The global rank of the previous stage (the first stage's previous is the last)."""
    groups = _groups()
    return groups.topology.pipeline(groups.global_rank).prev


def get_virtual_pipeline_model_parallel_world_size() -> int | None:
    """vpp (None without virtual stages)."""
    return _groups().topology.vpp


def get_virtual_pipeline_model_parallel_rank() -> int | None:
    """The current virtual stage (Megatron's global; prefer passing ``vp_stage``)."""
    return _virtual_rank


def set_virtual_pipeline_model_parallel_rank(rank: int) -> None:
    """Set the current virtual stage (Megatron's global; prefer passing ``vp_stage``)."""
    global _virtual_rank
    _virtual_rank = rank


def _vp_stage(ignore_virtual: bool, vp_stage: int | None) -> int | None:
    if ignore_virtual or _groups().topology.vpp is None:
        return None
    if vp_stage is None:
        raise TopologyError(
            "vp_stage must be passed when virtual pipeline stages are enabled "
            "(vpp is set); e.g. is_pipeline_first_stage(ignore_virtual=False, vp_stage=0)"
        )
    return vp_stage


def is_pipeline_first_stage(ignore_virtual: bool = True, vp_stage: int | None = None) -> bool:
    """Whether this rank is the first stage (and ``vp_stage`` the first virtual chunk)."""
    groups = _groups()
    stage = _vp_stage(ignore_virtual, vp_stage)
    return groups.topology.is_first_stage(groups.global_rank, stage)


def is_pipeline_last_stage(ignore_virtual: bool = True, vp_stage: int | None = None) -> bool:
    """Whether this rank is the last stage (and ``vp_stage`` the last virtual chunk)."""
    groups = _groups()
    stage = _vp_stage(ignore_virtual, vp_stage)
    return groups.topology.is_last_stage(groups.global_rank, stage)


def is_rank_in_embedding_group(ignore_virtual: bool = True, vp_stage: int | None = None) -> bool:
    """Whether this rank holds word embeddings (in virtual chunk ``vp_stage``)."""
    if not is_initialized():
        return False
    groups = _groups()
    stage = _vp_stage(ignore_virtual, vp_stage)
    return groups.topology.in_embedding(groups.global_rank, stage)


def is_rank_in_position_embedding_group() -> bool:
    """Whether this rank holds position embeddings."""
    if not is_initialized():
        return False
    groups = _groups()
    return groups.topology.has_group(groups.global_rank, "position-embedding")


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
