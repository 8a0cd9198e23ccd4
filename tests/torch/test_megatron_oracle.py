"""Differential tests against Megatron-core itself (skipped when megatron-core is not installed).

(a) For random valid layouts, Megatron's ``RankGenerator.get_ranks(token)`` equals our groups for
    every grid kind, in the same order (dense: ep = 1; expert: tp = etp, dp = edp, cp = 1).
(b) For a handful of layouts, ``parallel_state.initialize_model_parallel`` runs for every rank
    under the ``fake`` process-group backend and every group getter, rank getter and module
    global is compared with ``Topology.group_of`` / ``local_rank`` / ``pipeline``.
(c) Layouts Megatron rejects are rejected by us with TopologyError; the two places where we
    accept what Megatron refuses are pinned as deliberate.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import event, given, settings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    ps = pytest.importorskip("megatron.core.parallel_state")
    dist = pytest.importorskip("torch.distributed")
    fake_pg = pytest.importorskip("torch.testing._internal.distributed.fake_pg")

from topology import Topology, TopologyError
from topology.strategies import topologies

DENSE_TOKENS = ["dp-cp", "dp", "cp", "tp-pp", "tp", "pp", "tp-dp-cp", "tp-dp", "tp-cp"]
EXPERT_TOKENS = {"ep": "ep", "etp": "tp", "etp-ep": "tp-ep", "etp-ep-pp": "tp-ep-pp", "edp": "dp"}


def generators(topo: Topology) -> tuple[Any, Any]:
    """Megatron's dense and expert RankGenerators for ``topo``."""
    dense = ps.RankGenerator(
        tp=topo.tp,
        ep=1,
        dp=topo.dp,
        pp=topo.pp,
        cp=topo.cp,
        order=topo.order,
        rank_offset=topo.rank_offset,
    )
    expert = ps.RankGenerator(
        tp=topo.etp,
        ep=topo.ep,
        dp=topo.edp,
        pp=topo.pp,
        cp=1,
        order=topo.order,
        rank_offset=topo.rank_offset,
    )
    return dense, expert


@settings(max_examples=150)
@given(topologies(max_world_size=64))
def test_rank_generator_agrees_for_every_grid_kind(topo: Topology) -> None:
    """RankGenerator.get_ranks(token) == list(map(list, groups(kind))) for every grid kind."""
    dense, expert = generators(topo)
    for kind in DENSE_TOKENS:
        assert dense.get_ranks(kind) == [list(g) for g in topo.groups(kind)], kind
    if topo.expert is None:
        # Megatron would refuse this dense-only layout: its expert grid's pipelines differ.
        assert dense.get_ranks("pp") != expert.get_ranks("pp")
        return
    for kind, token in EXPERT_TOKENS.items():
        assert expert.get_ranks(token) == [list(g) for g in topo.groups(kind)], kind


# -- (b) the whole of initialize_model_parallel under the fake backend ----------------------------


# Globals that Megatron's destroy_model_parallel() leaves behind (0.16.1): a rank outside every
# embedding group would otherwise see the previous rank's _EMBEDDING_GLOBAL_RANKS.
STALE_GLOBALS = (
    "_DATA_PARALLEL_GLOBAL_RANKS",
    "_DATA_PARALLEL_GLOBAL_RANKS_WITH_CP",
    "_EMBEDDING_GLOBAL_RANKS",
    "_POSITION_EMBEDDING_GLOBAL_RANKS",
    "_EXPERT_MODEL_PARALLEL_RANKS",
    "_HIERARCHICAL_CONTEXT_PARALLEL_GROUPS",
    "_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP",
    "_MODEL_PARALLEL_GLOBAL_RANKS",
    "_MPU_DATA_PARALLEL_RANK",
    "_MPU_DATA_PARALLEL_WORLD_SIZE",
    "_PIPELINE_GLOBAL_RANKS",
    "_TENSOR_MODEL_PARALLEL_GLOBAL_RANKS",
)


@contextmanager
def megatron_rank(topo: Topology, rank: int) -> Iterator[None]:
    """Initialise Megatron's parallel state for ``rank`` of ``topo`` on a fake process group."""
    for name in STALE_GLOBALS:
        setattr(ps, name, None)
    dist.init_process_group(
        "fake", store=fake_pg.FakeStore(), rank=rank, world_size=topo.world_size
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ps.initialize_model_parallel(
                tensor_model_parallel_size=topo.tp,
                pipeline_model_parallel_size=topo.pp,
                virtual_pipeline_model_parallel_size=topo.vpp,
                context_parallel_size=topo.cp,
                hierarchical_context_parallel_sizes=(
                    None if topo.hcp_sizes is None else list(topo.hcp_sizes)
                ),
                expert_model_parallel_size=topo.ep,
                expert_tensor_parallel_size=topo.etp,
                num_distributed_optimizer_instances=topo.dist_opt_instances,
                order=topo.order,
                get_embedding_ranks=stage_picker(topo.embedding_stages),
                get_position_embedding_ranks=stage_picker(topo.position_embedding_stages),
                create_gloo_process_groups=False,
            )
        yield
    finally:
        ps.destroy_model_parallel()
        dist.destroy_process_group()


def stage_picker(stages: tuple[int, ...]) -> Any:
    """A Megatron ``get_embedding_ranks`` callable: the pp group's ranks at ``stages``."""
    return lambda ranks, *_: [ranks[s] for s in stages]


def default_stages(topo: Topology) -> bool:
    """True if the embedding stages are Megatron's defaults (first and last / first)."""
    return topo.embedding_stages == tuple(sorted({0, topo.pp - 1})) and (
        topo.position_embedding_stages == (0,)
    )


def ranks_of(group: Any) -> tuple[int, ...]:
    """The global ranks of a torch process group (torch keeps them sorted)."""
    return tuple(dist.get_process_group_ranks(group))


def group_getters(topo: Topology) -> dict[str, Any]:
    """Our kind -> a function returning Megatron's group for the current rank."""
    getters: dict[str, Any] = {
        "dp-cp": lambda: ps.get_data_parallel_group(with_context_parallel=True),
        "dp": ps.get_data_parallel_group,
        "cp": ps.get_context_parallel_group,
        "tp-pp": ps.get_model_parallel_group,
        "tp": ps.get_tensor_model_parallel_group,
        "pp": ps.get_pipeline_model_parallel_group,
        "tp-dp-cp": lambda: ps.get_tensor_and_data_parallel_group(with_context_parallel=True),
        "tp-dp": ps.get_tensor_and_data_parallel_group,
        "tp-cp": ps.get_tensor_and_context_parallel_group,
        "ep": ps.get_expert_model_parallel_group,
        "etp": ps.get_expert_tensor_parallel_group,
        "etp-ep": ps.get_expert_tensor_and_model_parallel_group,
        "etp-ep-pp": ps.get_expert_tensor_model_pipeline_parallel_group,
        "edp": ps.get_expert_data_parallel_group,
    }
    if topo.dist_opt_instances > 1:
        getters["intra-dp-cp"] = lambda: ps.get_data_parallel_group(
            with_context_parallel=True, partial_data_parallel=True
        )
        getters["intra-edp"] = lambda: ps.get_expert_data_parallel_group(
            partial_expert_data_parallel=True
        )
        getters["inter-edp"] = ps.get_inter_distributed_optimizer_instance_group
        getters["intra-dist-opt"] = ps.get_intra_distributed_optimizer_instance_group
    for level in range(len(topo.hcp_sizes or ())):
        getters[f"hcp-{level}"] = lambda level=level: ps._HIERARCHICAL_CONTEXT_PARALLEL_GROUPS[
            level
        ]
    return getters


def ordered_globals() -> dict[str, Any]:
    """Megatron's module globals that keep a group's ranks in Megatron's order."""
    return {
        "dp-cp": ps._DATA_PARALLEL_GLOBAL_RANKS_WITH_CP,
        "dp": ps._DATA_PARALLEL_GLOBAL_RANKS,
        "cp": ps._CONTEXT_PARALLEL_GLOBAL_RANKS,
        "tp-pp": ps._MODEL_PARALLEL_GLOBAL_RANKS,
        "tp": ps._TENSOR_MODEL_PARALLEL_GLOBAL_RANKS,
        "pp": ps._PIPELINE_GLOBAL_RANKS,
        "ep": ps._EXPERT_MODEL_PARALLEL_RANKS,
    }


RANK_GETTERS = {
    "tp": ps.get_tensor_model_parallel_rank,
    "pp": ps.get_pipeline_model_parallel_rank,
    "dp": ps.get_data_parallel_rank,
    "dp-cp": lambda: ps.get_data_parallel_rank(with_context_parallel=True),
    "cp": ps.get_context_parallel_rank,
    "tp-cp": ps.get_tensor_and_context_parallel_rank,
    "ep": ps.get_expert_model_parallel_rank,
    "etp": ps.get_expert_tensor_parallel_rank,
    "etp-ep": ps.get_expert_tensor_and_model_parallel_rank,
    "edp": ps.get_expert_data_parallel_rank,
}


def compare_rank(topo: Topology, rank: int) -> None:
    """Every Megatron getter and global for ``rank`` equals what ``topo`` says."""
    for kind, getter in group_getters(topo).items():
        assert ranks_of(getter()) == tuple(sorted(topo.group_of(rank, kind))), (rank, kind)
    for kind, ranks in ordered_globals().items():
        assert tuple(ranks) == topo.group_of(rank, kind), (rank, kind)
    for kind, getter in RANK_GETTERS.items():
        assert getter() == topo.local_rank(rank, kind), (rank, kind)
    for kind, ranks in (
        ("embedding", ps._EMBEDDING_GLOBAL_RANKS),
        ("position-embedding", ps._POSITION_EMBEDDING_GLOBAL_RANKS),
    ):
        expected = topo.group_of(rank, kind) if topo.has_group(rank, kind) else None
        assert (None if ranks is None else tuple(ranks)) == expected, (rank, kind)
    view = topo.pipeline(rank)
    assert ps.get_pipeline_model_parallel_next_rank() == view.next
    assert ps.get_pipeline_model_parallel_prev_rank() == view.prev
    assert ps.get_pipeline_model_parallel_first_rank() == view.first
    assert ps.get_pipeline_model_parallel_last_rank() == view.last
    assert ps.is_pipeline_first_stage() == view.is_first
    assert ps.is_pipeline_last_stage() == view.is_last
    assert ps.is_rank_in_embedding_group() == view.in_embedding
    assert ps.is_rank_in_position_embedding_group() == view.in_position_embedding
    assert ps.get_tensor_model_parallel_src_rank() == topo.group_of(rank, "tp")[0]
    assert ps.get_data_parallel_src_rank() == topo.group_of(rank, "dp")[0]
    # Megatron's vp-aware embedding test assumes the first embedding rank is the first stage;
    # with other embedding stages it is meaningless, so it is compared for the defaults only.
    for vp in range(topo.vpp or 1) if default_stages(topo) else ():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            first = ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp)
            last = ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp)
            embedded = ps.is_rank_in_embedding_group(ignore_virtual=False, vp_stage=vp)
        assert first == topo.is_first_stage(rank, vp_stage=vp), (rank, vp)
        assert last == topo.is_last_stage(rank, vp_stage=vp), (rank, vp)
        assert embedded == topo.in_embedding(rank, vp_stage=vp), (rank, vp)


LAYOUTS = {
    "megatron-16": Topology(16, tp=2, pp=4),
    "vpp": Topology(16, tp=2, pp=4, vpp=2),
    "cp-hcp": Topology(32, tp=2, cp=4, pp=2, hcp_sizes=(2, 2)),
    "moe-etp1": Topology(16, tp=2, ep=4, etp=1, pp=2),
    "moe-dist-opt": Topology(32, tp=2, cp=2, ep=2, etp=1, pp=2, dist_opt_instances=2),
    "cp3-dist-opt": Topology(24, tp=2, cp=3, pp=2, dist_opt_instances=2, hcp_sizes=(3,)),
    "order-tp-pp-dp": Topology(8, tp=2, pp=2, order="tp-pp-dp"),
    "moe-pp-inside": Topology(16, tp=4, ep=2, etp=2, pp=2, order="tp-ep-pp-dp"),
    "one-rank": Topology(1),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_initialize_model_parallel_agrees_on_every_rank(name: str) -> None:
    """Every group getter and global of initialize_model_parallel matches, for every rank."""
    topo = LAYOUTS[name]
    for rank in range(topo.world_size):
        with megatron_rank(topo, rank):
            compare_rank(topo, rank)


def megatron_refuses_deliberately(topo: Topology) -> bool:
    """The layouts we accept although Megatron refuses them (see the last test below)."""
    literal_pp_last = topo.order.endswith("pp") or topo.pp == 1
    return topo.expert is None or (not literal_pp_last and topo.edp != topo.dp)


@settings(max_examples=100)
@given(topologies(max_world_size=16, max_rank_offset=0))
def test_initialize_model_parallel_agrees_on_random_layouts(topo: Topology) -> None:
    """For random layouts, every rank's Megatron state matches ours (or the refusal is known)."""
    fields = {name: getattr(topo, name) for name in MEGATRON_ARGS}
    refused = megatron_rejects(topo.world_size, fields)
    event("megatron refuses" if refused else "megatron accepts")
    assert refused == megatron_refuses_deliberately(topo)
    if refused:
        return
    for rank in range(topo.world_size):
        with megatron_rank(topo, rank):
            compare_rank(topo, rank)


# -- (c) rejected layouts -------------------------------------------------------------------------

REJECTED: dict[str, tuple[int, dict[str, Any]]] = {
    "world-not-divisible": (12, {"tp": 8}),
    "vpp-without-pp": (8, {"vpp": 2}),
    "expert-not-divisible": (8, {"tp": 2, "ep": 3}),
    "hcp-product": (8, {"cp": 4, "hcp_sizes": (2, 3)}),
    "dist-opt-dp-cp": (8, {"tp": 2, "dist_opt_instances": 3}),
    "dist-opt-edp": (8, {"tp": 2, "ep": 4, "etp": 1, "dist_opt_instances": 4}),
    "edp-not-dp": (16, {"tp": 2, "pp": 2, "ep": 4, "order": "tp-ep-pp-dp"}),
    "pipelines-differ": (
        16,
        {"tp": 2, "cp": 2, "etp": 1, "ep": 4, "pp": 2, "order": "tp-pp-cp-ep-dp"},
    ),
    "order-missing-tp": (8, {"tp": 2, "order": "dp-pp"}),
}

MEGATRON_ARGS = {
    "tp": "tensor_model_parallel_size",
    "pp": "pipeline_model_parallel_size",
    "vpp": "virtual_pipeline_model_parallel_size",
    "cp": "context_parallel_size",
    "hcp_sizes": "hierarchical_context_parallel_sizes",
    "ep": "expert_model_parallel_size",
    "etp": "expert_tensor_parallel_size",
    "dist_opt_instances": "num_distributed_optimizer_instances",
    "order": "order",
}


def megatron_rejects(world: int, fields: dict[str, Any]) -> bool:
    """True if Megatron's initialize_model_parallel refuses the layout on rank 0."""
    args = {
        MEGATRON_ARGS[k]: (list(v) if k == "hcp_sizes" and v is not None else v)
        for k, v in fields.items()
    }
    dist.init_process_group("fake", store=fake_pg.FakeStore(), rank=0, world_size=world)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ps.initialize_model_parallel(create_gloo_process_groups=False, **args)
    except (RuntimeError, AssertionError):
        return True
    finally:
        ps.destroy_model_parallel()
        dist.destroy_process_group()
    return False


@pytest.mark.parametrize("name", list(REJECTED))
def test_what_megatron_rejects_we_reject(name: str) -> None:
    """Megatron refuses the layout (RuntimeError/AssertionError) and we raise TopologyError."""
    world, fields = REJECTED[name]
    assert megatron_rejects(world, fields)
    with pytest.raises(TopologyError):
        Topology(world, **fields)


def test_dense_layout_megatron_refuses_is_accepted_deliberately() -> None:
    """ezpz's tp-cp-pp-dp with cp > 1: Megatron refuses (its expert grid moves pp); we accept.

    Without MoE folding the expert kinds take their dense meaning (DESIGN 2.2, ``expert``).
    """
    fields: dict[str, Any] = {"tp": 2, "cp": 2, "pp": 2, "order": "tp-cp-pp-dp"}
    assert megatron_rejects(16, fields)
    topo = Topology(16, **fields)
    assert topo.expert is None
    assert list(topo.groups("edp")) == list(topo.groups("dp-cp"))
