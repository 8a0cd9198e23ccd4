"""The seed façades (ml, ezpz, megatron): golden layouts, real collectives, Megatron-core itself."""

from __future__ import annotations

import importlib.util
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

import topology_torch
from tests.torch.world import fake_world, run_world
from topology import TopologyError
from topology_torch.compat import ezpz, megatron, ml

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "seeds.json").read_text())["layouts"]
LAYOUTS = {layout["id"]: layout for layout in GOLDEN}


def _containing(groups: list[list[int]], rank: int) -> list[int]:
    (group,) = [g for g in groups if rank in g]
    return group


# -- golden layouts, every rank, fake backend -----------------------------------------------------


@pytest.mark.parametrize("name", ["ml-starter-8", "ml-starter-4"])
def test_ml_gives_every_rank_the_golden_group_containing_it(name: str) -> None:
    """ml: parallel_group_info's mp/pp/dp are the documented groups, at the rank's position."""
    layout = LAYOUTS[name]
    size = layout["world_size"]
    for rank in range(size):
        with fake_world(size, rank):
            ml.init_parallelism(layout["sizes"]["tp"], layout["sizes"]["pp"])
            info = ml.parallel_group_info()
            for field, kind in (("mp", "tp"), ("pp", "pp"), ("dp", "dp")):
                group = _containing(layout["groups"][kind], rank)
                got = getattr(info, field)
                assert got.global_ranks == group, (name, rank, field)
                assert got.rank == group.index(rank) and got.world_size == len(group)
                assert dist.get_process_group_ranks(got.group) == group
            ml.reset_parallelism()


@pytest.mark.parametrize("name", ["ezpz-8", "ezpz-16"])
def test_ezpz_accessors_return_the_golden_groups(name: str) -> None:
    """ezpz: get_*_parallel_{ranks,rank,world_size,group} match the documented layout."""
    layout = LAYOUTS[name]
    size, sizes = layout["world_size"], layout["sizes"]
    for rank in range(size):
        with fake_world(size, rank):
            ezpz.initialize_tensor_parallel(sizes["tp"], sizes["pp"], sizes["cp"])
            assert ezpz.tensor_parallel_is_initialized()
            for word, kind in (
                ("tensor", "tp"),
                ("data", "dp"),
                ("pipeline", "pp"),
                ("context", "cp"),
            ):
                if kind not in layout["groups"]:
                    continue
                group = _containing(layout["groups"][kind], rank)
                assert getattr(ezpz, f"get_{word}_parallel_ranks")() == group, (rank, kind)
                assert getattr(ezpz, f"get_{word}_parallel_rank")() == group.index(rank)
                assert getattr(ezpz, f"get_{word}_parallel_world_size")() == len(group)
                pg = getattr(ezpz, f"get_{word}_parallel_group")()
                assert dist.get_process_group_ranks(pg) == group
            tp_group = _containing(layout["groups"]["tp"], rank)
            assert ezpz.get_tensor_parallel_src_rank() == tp_group[0]
            ezpz.destroy_tensor_parallel()
            assert not ezpz.tensor_parallel_is_initialized()


MEGATRON_GETTERS: dict[str, Callable[[], Any]] = {
    "tp": megatron.get_tensor_model_parallel_group,
    "pp": megatron.get_pipeline_model_parallel_group,
    "dp": megatron.get_data_parallel_group,
    "cp": megatron.get_context_parallel_group,
    "tp-pp": megatron.get_model_parallel_group,
    "tp-dp": megatron.get_tensor_and_data_parallel_group,
}


@pytest.mark.parametrize(
    "name", ["megatron-16", "megatron-16-cp", "megatron-8-cp", "megatron-default-8"]
)
def test_megatron_accessors_return_the_golden_groups(name: str) -> None:
    """megatron: group getters, ranks and world sizes match the documented layout."""
    layout = LAYOUTS[name]
    size, sizes = layout["world_size"], layout["sizes"]
    for rank in range(size):
        with fake_world(size, rank):
            megatron.initialize_model_parallel(
                sizes["tp"], sizes["pp"], context_parallel_size=sizes["cp"], order=layout["order"]
            )
            for kind, groups in layout["groups"].items():
                group = _containing(groups, rank)
                ranks = dist.get_process_group_ranks(MEGATRON_GETTERS[kind]())
                assert ranks == group, (name, rank, kind)
            tp = _containing(layout["groups"]["tp"], rank)
            assert megatron.get_tensor_model_parallel_rank() == tp.index(rank)
            assert megatron.get_tensor_model_parallel_src_rank() == tp[0]
            pp = _containing(layout["groups"]["pp"], rank) if sizes["pp"] > 1 else [rank]
            stage = pp.index(rank)
            assert megatron.get_pipeline_model_parallel_rank() == stage
            assert megatron.get_pipeline_model_parallel_next_rank() == pp[(stage + 1) % len(pp)]
            assert megatron.get_pipeline_model_parallel_prev_rank() == pp[stage - 1]
            assert megatron.is_pipeline_first_stage() == (stage == 0)
            assert megatron.is_pipeline_last_stage() == (stage == len(pp) - 1)
            assert megatron.is_rank_in_embedding_group() == (stage in (0, len(pp) - 1))
            megatron.destroy_model_parallel()


def test_megatron_embedding_callables_become_stages() -> None:
    """get_embedding_ranks picking the first and second stage gives those ranks a group."""
    with fake_world(8, 2):  # stage 1 of the pipeline 0, 2, 4, 6
        megatron.initialize_model_parallel(
            1, 4, get_embedding_ranks=lambda ranks: ranks[:2], create_gloo_process_groups=False
        )
        assert dist.get_process_group_ranks(megatron.get_embedding_group()) == [0, 2]
        assert megatron.is_rank_in_embedding_group()
        megatron.destroy_model_parallel()


def test_facades_refuse_invalid_input_with_clear_errors() -> None:
    """Bad sizes and double initialization raise the documented error types with the arithmetic."""
    with pytest.raises(ml.ParallismError, match=r"torch\.distributed is not initialized"):
        ml.init_parallelism(2)
    assert ml.default_group_info() is None
    with fake_world(8, 0):
        with pytest.raises(ml.ParallismError, match=r"world_size 8 is not divisible by tp\(3\)"):
            ml.init_parallelism(3)
        assert issubclass(ml.ParallismError, TopologyError)
        ml.init_parallelism(2)
        with pytest.raises(
            ml.ParallismError, match=r"compat.ml is already initialized with .*; call compat.ml"
        ):
            ml.init_parallelism(2)
        ml.reset_parallelism()
        assert not ml.parallelism_is_initialized()
        with pytest.raises(ml.ParallismError, match=r"not initialized; call compat.ml.init_paral"):
            ml.parallel_group_info()
        with pytest.raises(TopologyError, match=r"world_size 8 is not divisible by tp\(16\)"):
            ezpz.initialize_tensor_parallel(16)
        with pytest.raises(TopologyError, match=r"10 is not divisible by 4 \(10 % 4 = 2\)"):
            ezpz.split_tensor_along_last_dim(torch.zeros(3, 10), 4)
        with pytest.raises(TopologyError, match=r"only valid with use_sharp=True") as refused:
            megatron.initialize_model_parallel(2, sharp_enabled_group="dp")
        assert isinstance(refused.value, AssertionError)  # the class Megatron raises there
        with pytest.raises(TopologyError, match=r"get_embedding_ranks picks stages"):
            megatron.initialize_model_parallel(
                1, 4, get_embedding_ranks=lambda r: [r[0]] if r[0] == 0 else [r[-1]]
            )
        megatron.initialize_model_parallel(2, 2, virtual_pipeline_model_parallel_size=2)
        with pytest.raises(TopologyError, match="vp_stage must be passed"):
            megatron.is_pipeline_first_stage(ignore_virtual=False)
        assert megatron.is_pipeline_first_stage(ignore_virtual=False, vp_stage=0)
        assert not megatron.is_pipeline_first_stage(ignore_virtual=False, vp_stage=1)
        with pytest.raises(TopologyError, match="already initialized"):
            megatron.initialize_model_parallel(2)
        megatron.destroy_model_parallel()
        assert megatron.is_unitialized()


# -- real collectives on 8 gloo ranks ------------------------------------------------------------


def _seed_usage(rank: int, world_size: int) -> None:
    golden = LAYOUTS["ml-starter-8"]["groups"]
    ml.init_parallelism(2, 2)
    info = ml.parallel_group_info()
    for field, kind in (("mp", "tp"), ("pp", "pp"), ("dp", "dp")):
        group = _containing(golden[kind], rank)
        part = getattr(info, field)
        total = part.reduce(torch.tensor([2**rank], dtype=torch.int64))
        assert total.item() == sum(2**m for m in group), (field, total)
        whole = torch.arange(12.0).view(3, 4)
        mine = part.split(whole, dim=1)
        assert torch.equal(mine, whole[:, 2 * part.rank : 2 * part.rank + 2])
        assert torch.equal(part.gather(mine, dim=1), whole)
    world = ml.default_group_info()
    assert world is not None and world.global_ranks == list(range(8))
    assert topology_torch.current().group("tp") is info.mp.group  # layers see the same groups
    ml.reset_parallelism()

    ezpz.initialize_tensor_parallel(2)
    value = torch.tensor([float(rank)])
    dist.all_reduce(value, group=ezpz.get_data_parallel_group())
    assert value.item() == sum(_containing(LAYOUTS["ezpz-8"]["groups"]["dp"], rank))
    ezpz.destroy_tensor_parallel()

    megatron.initialize_model_parallel(2, 2)
    value = torch.tensor([float(rank)])
    dist.all_reduce(value, group=megatron.get_data_parallel_group_gloo(with_context_parallel=True))
    assert value.item() == sum(_containing(LAYOUTS["megatron-default-8"]["groups"]["dp"], rank))
    if megatron.is_rank_in_embedding_group():
        value = torch.ones(1)
        dist.all_reduce(value, group=megatron.get_embedding_group())
        assert value.item() == 2
    megatron.destroy_model_parallel()


def test_facades_run_real_collectives_over_the_documented_groups() -> None:
    """On 8 gloo ranks, each façade's groups reduce, split and gather as the seeds describe."""
    run_world(8, _seed_usage)


def _tp_sum(group: Any, rank: int) -> float:
    value = torch.tensor([float(2**rank)])
    dist.all_reduce(value, group=group)
    return value.item()


def _megatron_then_ezpz(rank: int, world_size: int) -> None:
    megatron.initialize_model_parallel(2)
    with pytest.raises(
        TopologyError,
        match=r"^compat.ezpz.destroy_tensor_parallel\(\) found the default process groups made "
        r"by compat.megatron.initialize_model_parallel\(\), not by compat.ezpz; they were left",
    ):
        ezpz.destroy_tensor_parallel()
    assert megatron.model_parallel_is_initialized() and not ezpz.tensor_parallel_is_initialized()
    assert _tp_sum(megatron.get_tensor_model_parallel_group(), rank) == 3.0  # still alive
    with pytest.raises(TopologyError, match=r"^compat.ezpz is not initialized \(the default"):
        ezpz.get_tensor_parallel_group()
    with pytest.raises(
        TopologyError, match=r"call compat.megatron.destroy_model_parallel\(\) first"
    ):
        ezpz.initialize_tensor_parallel(2)
    assert _tp_sum(megatron.get_tensor_model_parallel_group(), rank) == 3.0
    megatron.destroy_model_parallel()
    assert not topology_torch.is_initialized()


def _ezpz_then_megatron(rank: int, world_size: int) -> None:
    ezpz.initialize_tensor_parallel(2)
    with pytest.raises(
        TopologyError,
        match=r"^compat.megatron.destroy_model_parallel\(\) found the default process groups "
        r"made by compat.ezpz.initialize_tensor_parallel\(\), not by compat.megatron",
    ):
        megatron.destroy_model_parallel()
    assert ezpz.tensor_parallel_is_initialized() and not megatron.is_initialized()
    assert megatron.get_tensor_model_parallel_group(check_initialized=False) is None
    with pytest.raises(ml.ParallismError, match=r"call compat.ezpz.destroy_tensor_parallel"):
        ml.reset_parallelism()
    assert _tp_sum(ezpz.get_tensor_parallel_group(), rank) == 3.0  # still alive
    ezpz.destroy_tensor_parallel()
    assert not topology_torch.is_initialized()


@pytest.mark.parametrize("order", [_megatron_then_ezpz, _ezpz_then_megatron])
def test_a_facade_never_destroys_groups_another_facade_made(order: Callable[..., None]) -> None:
    """Destroying through one façade leaves another façade's groups usable, in both orders."""
    run_world(2, order)


# -- Megatron-core itself as the oracle -----------------------------------------------------------

HAS_MEGATRON = importlib.util.find_spec("megatron") is not None

DIFFERENTIAL = [
    (16, {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 4}),
    (
        16,
        {
            "tensor_model_parallel_size": 2,
            "context_parallel_size": 2,
            "pipeline_model_parallel_size": 2,
        },
    ),
    (
        16,
        {
            "tensor_model_parallel_size": 2,
            "pipeline_model_parallel_size": 2,
            "expert_model_parallel_size": 4,
            "expert_tensor_parallel_size": 1,
        },
    ),
    (
        16,
        {
            "context_parallel_size": 4,
            "hierarchical_context_parallel_sizes": [2, 2],
            "expert_model_parallel_size": 2,
            "num_distributed_optimizer_instances": 2,
        },
    ),
    (8, {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2, "order": "tp-pp-dp"}),
]

GROUP_GETTERS = [
    "get_tensor_model_parallel_group",
    "get_pipeline_model_parallel_group",
    "get_model_parallel_group",
    "get_context_parallel_group",
    "get_tensor_and_context_parallel_group",
    "get_expert_model_parallel_group",
    "get_expert_tensor_parallel_group",
    "get_expert_tensor_and_model_parallel_group",
    "get_expert_tensor_model_pipeline_parallel_group",
    "get_expert_data_parallel_group",
    "get_embedding_group",
    "get_position_embedding_group",
]
VALUE_GETTERS = [
    "get_tensor_model_parallel_rank",
    "get_tensor_model_parallel_world_size",
    "get_tensor_model_parallel_src_rank",
    "get_model_parallel_src_rank",
    "get_pipeline_model_parallel_rank",
    "get_pipeline_model_parallel_world_size",
    "get_pipeline_model_parallel_first_rank",
    "get_pipeline_model_parallel_last_rank",
    "get_pipeline_model_parallel_next_rank",
    "get_pipeline_model_parallel_prev_rank",
    "get_context_parallel_rank",
    "get_context_parallel_world_size",
    "get_context_parallel_global_ranks",
    "get_expert_model_parallel_rank",
    "get_expert_model_parallel_world_size",
    "get_expert_tensor_parallel_rank",
    "get_expert_data_parallel_rank",
    "get_expert_data_parallel_world_size",
    "is_pipeline_first_stage",
    "is_pipeline_last_stage",
    "is_rank_in_embedding_group",
    "is_rank_in_position_embedding_group",
]


def _observe(module: Any, instances: int, levels: bool) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for name in GROUP_GETTERS:
        group = getattr(module, name)(check_initialized=False)
        seen[name] = None if group is None else dist.get_process_group_ranks(group)
    for cp in (False, True):
        for partial in (False, True) if instances > 1 and cp else (False,):
            group = module.get_data_parallel_group(
                with_context_parallel=cp, partial_data_parallel=partial
            )
            seen[f"dp {cp} {partial}"] = dist.get_process_group_ranks(group)
            seen[f"dp rank {cp} {partial}"] = module.get_data_parallel_rank(cp, partial)
        seen[f"tp-dp {cp}"] = dist.get_process_group_ranks(
            module.get_tensor_and_data_parallel_group(with_context_parallel=cp)
        )
        seen[f"dp src {cp}"] = module.get_data_parallel_src_rank(cp)
    if instances > 1:
        for name in (
            "get_intra_distributed_optimizer_instance_group",
            "get_inter_distributed_optimizer_instance_group",
        ):
            seen[name] = dist.get_process_group_ranks(getattr(module, name)())
        seen["intra-edp"] = dist.get_process_group_ranks(
            module.get_expert_data_parallel_group(partial_expert_data_parallel=True)
        )
    if levels:  # Megatron's destroy_model_parallel forgets to reset these, so ask only then
        groups = module.get_hierarchical_context_parallel_groups()
        seen["hcp"] = [dist.get_process_group_ranks(g) for g in groups]
    for name in VALUE_GETTERS:
        seen[name] = getattr(module, name)()
    return seen


@pytest.mark.skipif(not HAS_MEGATRON, reason="megatron-core is not installed")
@pytest.mark.parametrize(("world_size", "kwargs"), DIFFERENTIAL)
def test_megatron_facade_agrees_with_megatron_core_on_every_rank(
    world_size: int, kwargs: dict[str, Any]
) -> None:
    """Under the fake backend, every accessor equals Megatron-core's parallel_state, per rank."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core import parallel_state
    instances = kwargs.get("num_distributed_optimizer_instances", 1)
    levels = "hierarchical_context_parallel_sizes" in kwargs
    for rank in range(world_size):
        with fake_world(world_size, rank):
            parallel_state.initialize_model_parallel(**kwargs, create_gloo_process_groups=False)
            theirs = _observe(parallel_state, instances, levels)
            parallel_state.destroy_model_parallel()
            megatron.initialize_model_parallel(**kwargs, create_gloo_process_groups=False)
            ours = _observe(megatron, instances, levels)
            megatron.destroy_model_parallel()
        different = {k: (ours[k], theirs[k]) for k in theirs if ours[k] != theirs[k]}
        assert not different, (rank, different)


@pytest.mark.skipif(not HAS_MEGATRON, reason="megatron-core is not installed")
def test_process_group_collection_holds_our_groups() -> None:
    """Megatron's ProcessGroupCollection built from the façade holds exactly our group objects."""
    with warnings.catch_warnings(), fake_world(16, 13):  # the last of the stages 5, 13
        warnings.simplefilter("ignore")
        megatron.initialize_model_parallel(2, 2, expert_model_parallel_size=2)
        collection = megatron.process_group_collection()
        groups = topology_torch.current()
        assert collection.tp is groups.group("tp") and collection.mp is groups.group("tp-pp")
        assert collection.expt_dp is groups.group("edp") and collection.embd is groups.group(
            "embedding"
        )
        # position embeddings live on stage 0 only: None, as use_mpu_process_groups sets it
        assert "pos_embd" in vars(collection) and collection.pos_embd is None
        megatron.destroy_model_parallel()
