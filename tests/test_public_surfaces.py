"""The public names of ``topology.cost``, ``topology_torch.ops``, ``topology_torch.layers``,
``topology_torch.recovery`` and each ``topology_torch.compat`` façade are pinned: a change here is
a deliberate API change.

The package roots are pinned in ``tests/test_public_api.py`` and ``tests/torch/test_public_api.py``.
The torch modules are skipped when torch is absent.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

EXPECTED: dict[str, tuple[str, ...]] = {
    "topology.cost": (
        "A100_NODE",
        "DEFAULT_ORDERS",
        "DIMENSIONS",
        "H100_NODE",
        "HARDWARE",
        "MODELS",
        "SCENARIOS",
        "TOY_GPU",
        "TOY_WORKLOAD",
        "Estimate",
        "Hardware",
        "Link",
        "Memory",
        "Model",
        "Plan",
        "Scenario",
        "Workload",
        "all_gather",
        "all_reduce",
        "all_to_all",
        "estimate",
        "load_hardware",
        "load_model",
        "p2p",
        "plan",
        "reduce_scatter",
        "scenario",
        "sequential_ring",
    ),
    "topology_torch.compat.deepspeed": (
        "PipeDataParallelTopology",
        "PipeModelDataParallelTopology",
        "PipelineParallelGrid",
        "ProcessTopology",
    ),
    "topology_torch.compat.torchtitan": ("MeshNameError", "ParallelDims", "device_type"),
    "topology_torch.transfer": ("execute", "execute_refit", "megatron_shards", "shards_of"),
    "topology_torch.recovery": ("agree_lost", "apply", "grow"),
    "topology_torch.compat.ezpz": (
        "destroy_tensor_parallel",
        "divide_and_check_no_remainder",
        "ensure_divisibility",
        "get_context_parallel_group",
        "get_context_parallel_rank",
        "get_context_parallel_ranks",
        "get_context_parallel_world_size",
        "get_data_parallel_group",
        "get_data_parallel_rank",
        "get_data_parallel_ranks",
        "get_data_parallel_world_size",
        "get_pipeline_parallel_group",
        "get_pipeline_parallel_rank",
        "get_pipeline_parallel_ranks",
        "get_pipeline_parallel_world_size",
        "get_tensor_parallel_group",
        "get_tensor_parallel_rank",
        "get_tensor_parallel_ranks",
        "get_tensor_parallel_src_rank",
        "get_tensor_parallel_world_size",
        "initialize_tensor_parallel",
        "split_tensor_along_last_dim",
        "tensor_parallel_is_initialized",
    ),
    "topology_torch.compat.fairscale": (
        "ColumnParallelLinear",
        "ParallelEmbedding",
        "RowParallelLinear",
        "VocabParallelEmbedding",
        "_initialize_affine_weight",
        "destroy_model_parallel",
        "get_context_parallel_group",
        "get_context_parallel_rank",
        "get_context_parallel_ranks",
        "get_context_parallel_world_size",
        "get_data_parallel_group",
        "get_data_parallel_rank",
        "get_data_parallel_ranks",
        "get_data_parallel_world_size",
        "get_model_parallel_group",
        "get_model_parallel_rank",
        "get_model_parallel_src_rank",
        "get_model_parallel_world_size",
        "get_pipeline_parallel_group",
        "get_pipeline_parallel_ranks",
        "initialize_model_parallel",
        "model_parallel_is_initialized",
    ),
    "topology_torch.compat.megatron.hyper_comm_grid": ("HyperCommGrid",),
    "topology_torch.compat.megatron.mimo": (
        "FAMILIES",
        "LANGUAGE",
        "HeteroTopology",
        "ModuleGridSpec",
        "create_topology",
        "modules_of",
    ),
    "topology_torch.compat.megatron": (
        "HyperCommGrid",
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
    ),
    "topology_torch.compat.ml": (
        "ParallismError",
        "default_group_info",
        "init_parallelism",
        "parallel_group_info",
        "parallelism_is_initialized",
        "reset_parallelism",
    ),
    "topology_torch.compat.ml_lora": (
        "freeze_non_lora_",
        "lora",
        "maybe_lora",
    ),
    "topology_torch.layers": (
        "INIT_TYPES",
        "ColumnParallelLinear",
        "IdOutOfRangeError",
        "InitType",
        "ParallelEmbedding",
        "RowParallelLinear",
        "VocabParallelEmbedding",
        "initialize_model_parallel_affine_weight_",
    ),
    "topology_torch.ops": (
        "DEBUG_ENV",
        "debug_checks",
        "debug_checks_enabled",
        "group_rank",
        "group_size",
        "mp_copy",
        "mp_gather",
        "mp_reduce",
        "mp_scatter",
        "resolve_group",
        "sp_gather",
        "sp_scatter",
    ),
}

TORCH_FREE = ("topology.cost",)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_all_is_pinned(name: str) -> None:
    """The module's __all__ is exactly the pinned list, in the pinned order."""
    if name not in TORCH_FREE:
        pytest.importorskip("torch")
    module = importlib.import_module(name)
    assert tuple(module.__all__) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_public_name_exists(name: str) -> None:
    """Every name in __all__ exists; its functions and classes have a docstring."""
    if name not in TORCH_FREE:
        pytest.importorskip("torch")
    module = importlib.import_module(name)
    for public in module.__all__:
        value = getattr(module, public)
        if inspect.isfunction(value) or inspect.isclass(value):
            assert value.__doc__, f"{name}.{public} has no docstring"


def test_the_compat_package_is_only_a_namespace() -> None:
    """``topology_torch.compat`` re-exports nothing: each façade is imported by its own name."""
    pytest.importorskip("torch")
    compat = importlib.import_module("topology_torch.compat")
    assert getattr(compat, "__all__", []) == []
    assert compat.__doc__ is not None
    for facade in ("megatron", "fairscale", "ezpz", "ml", "ml_lora", "deepspeed", "torchtitan"):
        assert f"compat.{facade}" in compat.__doc__
