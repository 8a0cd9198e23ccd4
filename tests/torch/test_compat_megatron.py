"""compat.megatron as Megatron-core 0.16.1's parallel_state: RankGenerator computed by the core,
the set_* overrides, Megatron's exception classes, the separate all-gather communicator and the
module globals Megatron's tests read."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("torch.distributed")

import torch.distributed as dist

from topology import TopologyError
from topology_torch.compat import megatron
from topology_torch.compat._errors import FacadeAssertionError, FacadeRuntimeError

from .oracle import oracle_0_19
from .world import run_world

TOKENS = ["tp", "cp", "dp", "pp", "ep", "tp-pp", "dp-cp", "tp-dp", "tp-dp-cp", "tp-cp", "tp-ep"]


def _theirs() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip("megatron.core.parallel_state")


@st.composite
def generators(draw: st.DrawFn) -> dict[str, Any]:
    """Keyword arguments of a RankGenerator: small sizes, ep or cp at 1, a shuffled order."""
    sizes = {name: draw(st.sampled_from([1, 2, 3])) for name in ("tp", "dp", "pp")}
    expert = draw(st.booleans())
    sizes["ep"] = draw(st.sampled_from([1, 2])) if expert else 1
    sizes["cp"] = 1 if expert else draw(st.sampled_from([1, 2]))
    names = draw(st.permutations(["tp", "cp", "ep", "dp", "pp"]))
    named = [n for n in names if sizes[n] > 1 or draw(st.booleans())] or ["tp"]
    return {**sizes, "order": "-".join(named), "rank_offset": draw(st.sampled_from([0, 4]))}


@settings(max_examples=60, deadline=None)
@given(generators())
def test_rank_generator_equals_megatrons(kwargs: dict[str, Any]) -> None:
    """RankGenerator: same attributes and the same groups as Megatron-core's, for every token."""
    theirs = _theirs().RankGenerator(**kwargs)
    ours = megatron.RankGenerator(**kwargs)
    assert (ours.order, ours.ordered_size, ours.world_size) == (
        theirs.order,
        theirs.ordered_size,
        theirs.world_size,
    )
    for token in TOKENS:
        if all(t in theirs.order.split("-") for t in token.split("-")):
            assert ours.get_ranks(token) == theirs.get_ranks(token), token


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=4).flatmap(
        lambda sizes: st.tuples(
            st.just(sizes), st.lists(st.booleans(), min_size=len(sizes), max_size=len(sizes))
        )
    )
)
def test_masked_groups_equal_megatrons(case: tuple[list[int], list[bool]]) -> None:
    """generate_masked_orthogonal_rank_groups equals Megatron-core's."""
    sizes, mask = case
    world = 1
    for size in sizes:
        world *= size
    theirs = _theirs().generate_masked_orthogonal_rank_groups(world, sizes, mask)
    assert megatron.generate_masked_orthogonal_rank_groups(world, sizes, mask) == theirs


def test_rank_generator_refuses_like_megatron() -> None:
    """ep and cp above 1 together: AssertionError; a size missing from the order: RuntimeError."""
    with pytest.raises(FacadeAssertionError, match=r"ep\(2\) and cp\(2\) are both above 1"):
        megatron.RankGenerator(tp=1, ep=2, dp=1, pp=1, cp=2, order="tp-cp-ep-dp-pp")
    with pytest.raises(RuntimeError, match=r"pp\(2\) is above 1 but order 'tp-dp'"):
        megatron.RankGenerator(tp=1, ep=1, dp=1, pp=2, cp=1, order="tp-dp")
    with pytest.raises(TopologyError, match=r"token 'xp' names 'xp'"):
        megatron.RankGenerator(tp=1, ep=1, dp=1, pp=1, cp=1, order="tp").get_ranks("xp")


def test_overrides_answer_before_initialization() -> None:
    """set_* values answer without groups (Megatron's fake_initialize_model_parallel)."""
    try:
        megatron.set_tensor_model_parallel_world_size(4)
        megatron.set_tensor_model_parallel_rank(1)
        megatron.set_pipeline_model_parallel_world_size(2)
        megatron.set_expert_model_parallel_rank(0)
        assert megatron.get_tensor_model_parallel_world_size() == 4
        assert megatron.get_tensor_model_parallel_rank() == 1
        assert megatron.get_expert_tensor_parallel_world_size() == 4  # falls back to tp's
        assert megatron.get_expert_model_parallel_rank() == 0
        assert megatron._MPU_TENSOR_MODEL_PARALLEL_WORLD_SIZE == 4
    finally:
        megatron.destroy_model_parallel()
    assert megatron._MPU_TENSOR_MODEL_PARALLEL_WORLD_SIZE is None


def test_getters_before_initialization_raise_assertion_errors() -> None:
    """Getters before initialization raise an AssertionError that is a TopologyError."""
    with pytest.raises(AssertionError, match="not initialized"):
        megatron.get_tensor_model_parallel_group()
    assert megatron._MODEL_PARALLEL_GROUP is None


def test_initialize_before_torch_distributed_is_an_assertion_error() -> None:
    """initialize_model_parallel before init_process_group: AssertionError, as in Megatron."""
    if dist.is_initialized():
        pytest.skip("a default group exists in this process")
    with pytest.raises(FacadeAssertionError, match="init_process_group"):
        megatron.initialize_model_parallel()


def _sizes_that_do_not_fit(rank: int, world_size: int) -> None:
    for kwargs in (
        {"tensor_model_parallel_size": 2 * world_size},
        {"pipeline_model_parallel_size": world_size, "tensor_model_parallel_size": world_size},
        {"virtual_pipeline_model_parallel_size": 2},
    ):
        with pytest.raises(FacadeRuntimeError):
            megatron.initialize_model_parallel(**kwargs)
    assert not megatron.is_initialized()


def test_sizes_that_do_not_fit_raise_runtime_errors() -> None:
    """Sizes that do not fit the world raise RuntimeError on every rank, as in Megatron."""
    run_world(4, _sizes_that_do_not_fit)


def _overrides_fall_back(rank: int, world_size: int) -> None:
    megatron.initialize_model_parallel(tensor_model_parallel_size=world_size)
    megatron.set_tensor_model_parallel_world_size(3)
    assert megatron.get_tensor_model_parallel_world_size() == 3
    megatron.set_tensor_model_parallel_world_size(None)
    assert megatron.get_tensor_model_parallel_world_size() == world_size
    megatron.set_tensor_model_parallel_rank(None)
    assert megatron.get_tensor_model_parallel_rank() == rank
    megatron.set_expert_tensor_parallel_rank(None)
    assert megatron.get_expert_tensor_parallel_rank() == rank
    megatron.destroy_model_parallel()
    assert megatron._MODEL_PARALLEL_GROUP is None


def test_overrides_set_to_none_fall_back_to_the_group() -> None:
    """set_*(None) makes the getter answer from the group again."""
    run_world(4, _overrides_fall_back)


def _all_gather_and_amax(rank: int, world_size: int) -> None:
    megatron.initialize_model_parallel(2, context_parallel_size=2, create_all_gather_group=True)
    assert megatron.has_separate_all_gather_group()
    regular = megatron.get_data_parallel_group(with_context_parallel=True)
    gather = megatron.get_data_parallel_group(
        with_context_parallel=True, independent_all_gather=True
    )
    assert gather is not regular
    assert dist.get_process_group_ranks(gather) == dist.get_process_group_ranks(regular)
    assert megatron._DATA_PARALLEL_GROUP_WITH_CP_AG is gather
    amax = megatron.get_amax_reduction_group(with_context_parallel=True)
    assert dist.get_process_group_ranks(amax) == list(range(world_size))
    assert amax is dist.group.WORLD  # the default group, not a second world communicator
    tp = megatron.get_amax_reduction_group(tp_only_amax_red=True)
    assert tp is megatron.get_tensor_model_parallel_group()
    megatron.destroy_model_parallel()
    assert megatron._DATA_PARALLEL_GROUP_WITH_CP_AG is None


def test_separate_all_gather_group_and_amax_groups() -> None:
    """create_all_gather_group makes a second dp-cp communicator; amax groups are Megatron's."""
    run_world(4, _all_gather_and_amax)


# -- megatron-core 0.19's API on the façade -----------------------------------------------------


def _fake(rank: int = 3, world_size: int = 8) -> None:
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)


def test_gtp_getters_without_gtp_answer_as_megatron_0_19() -> None:
    """At gtp 1 the GTP group is this rank alone, its size 1, and with_gtp_remat changes nothing."""
    _fake()
    try:
        assert megatron.get_gtp_weight_remat_world_size() == 0  # before initialization
        assert megatron.get_gtp_weight_remat_group(check_initialized=False) is None
        megatron.initialize_model_parallel(2, 2)
        for group, ranks in (
            (megatron.get_gtp_weight_remat_group(), megatron.get_gtp_weight_remat_global_ranks()),
            (
                megatron.get_expert_gtp_weight_remat_group(),
                megatron.get_expert_gtp_weight_remat_global_ranks(),
            ),
        ):
            assert dist.get_process_group_ranks(group) == ranks == [3]
        assert megatron.get_gtp_weight_remat_world_size() == 1
        assert megatron.get_expert_gtp_weight_remat_rank() == 0
        assert megatron._GTP_WEIGHT_REMAT_GROUP is megatron.get_gtp_weight_remat_group()
        plain = megatron.get_data_parallel_group(with_gtp_remat=False)
        assert megatron.get_data_parallel_group() is plain
        assert megatron._DATA_PARALLEL_GROUP_WITH_GTP_REMAT is plain
        assert megatron.get_expert_data_parallel_group() is megatron.get_expert_data_parallel_group(
            with_gtp_remat=False
        )
        assert (
            megatron.get_expert_tensor_model_pipeline_parallel_group(with_egtp_remat=True)
            is megatron.get_expert_tensor_model_pipeline_parallel_group()
        )
        megatron.destroy_model_parallel()
        assert megatron._GTP_WEIGHT_REMAT_GROUP is None
    finally:
        dist.destroy_process_group()


def test_create_all_gather_groups_makes_second_communicators() -> None:
    """0.18's create_all_gather_groups: dp-cp (and edp with ep > 1) ranks, new communicators."""
    _fake()
    try:
        with pytest.raises(FacadeRuntimeError, match="requires parallel state"):
            megatron.create_all_gather_groups()
        megatron.initialize_model_parallel(2, expert_model_parallel_size=2)
        dense, expert = megatron.create_all_gather_groups(for_expert_parallelism=True)
        regular = megatron.get_data_parallel_group(with_context_parallel=True)
        assert dense is not regular
        assert dist.get_process_group_ranks(dense) == dist.get_process_group_ranks(regular)
        edp = megatron.get_expert_data_parallel_group()
        assert expert is not edp
        assert dist.get_process_group_ranks(expert) == dist.get_process_group_ranks(edp)
        assert megatron.create_all_gather_groups()[1] is None  # no expert group unless asked
        megatron.destroy_model_parallel()
    finally:
        dist.destroy_process_group()


def test_arguments_our_groups_cannot_span_are_refused() -> None:
    """rank_offset and a smaller local_world_size are refused with the fix; the world's size is
    accepted."""
    _fake()
    try:
        with pytest.raises(FacadeAssertionError, match=r"rank_offset=4 .* leave rank_offset=0"):
            megatron.initialize_model_parallel(rank_offset=4)
        with pytest.raises(FacadeAssertionError, match=r"local_world_size=4 .* None or 8"):
            megatron.initialize_model_parallel(local_world_size=4)
        megatron.initialize_model_parallel(local_world_size=8)
        megatron.destroy_model_parallel()
    finally:
        dist.destroy_process_group()


GENERATORS_0_19 = """
import json, random, sys
import megatron.core.parallel_state as ps
random.seed(int(sys.argv[1]))
out = []
for _ in range(60):
    sizes = {n: random.choice([1, 2, 3]) for n in ("tp", "dp", "pp")}
    ep = random.choice([1, 2])
    cp = 1 if ep > 1 else random.choice([1, 2])
    names = ["tp", "cp", "ep", "dp", "pp"]
    random.shuffle(names)
    order = ps._inject_gtp_remat_axis("-".join(names), after=random.choice(["tp", "ep"]))
    g = random.choice([1, 2, 3])
    kw = dict(sizes, ep=ep, cp=cp, order=order, rank_offset=random.choice([0, 4]), gtp_remat=g)
    gen = ps.RankGenerator(**kw)
    tokens = ["tp", "dp", "pp", "gtp_remat", "gtp_remat-dp", "tp-gtp_remat-pp"]
    tokens.append("tp-ep-gtp_remat-pp")
    ranks = {t: gen.get_ranks(t) for t in tokens if set(t.split("-")) <= set(gen.order.split("-"))}
    ranks["get_gtp_ranks"] = gen.get_gtp_ranks(g)
    out.append([kw, gen.order, ranks])
print(json.dumps(out))
"""


def test_rank_generator_with_gtp_equals_megatron_0_19() -> None:
    """RankGenerator(gtp_remat=...) gives 0.19.2's groups (60 generators, in a subprocess)."""
    import json
    import os
    import subprocess
    import sys

    oracle = oracle_0_19()
    env = {**os.environ, "PYTHONPATH": str(oracle), "NO_VCS_VERSION": "1"}
    done = subprocess.run(
        [sys.executable, "-c", GENERATORS_0_19, "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for kwargs, order, ranks in json.loads(done.stdout):
        ours = megatron.RankGenerator(**kwargs)
        assert ours.order == order, kwargs
        for token, groups in ranks.items():
            if token == "get_gtp_ranks":
                assert ours.get_gtp_ranks(kwargs["gtp_remat"]) == groups, kwargs
            else:
                assert ours.get_ranks(token) == groups, (kwargs, token)


def test_gtp_widens_the_data_parallel_getters() -> None:
    """gtp_remat_size=2: the GTP group has 2 ranks and with_gtp_remat (the default) doubles dp."""

    _fake()
    try:
        megatron.initialize_model_parallel(2, gtp_remat_size=2, expert_gtp_remat_size=2)
        assert megatron.get_gtp_weight_remat_world_size() == 2
        assert megatron.get_expert_gtp_weight_remat_world_size() == 2
        assert megatron.get_data_parallel_world_size() == 4
        assert megatron.get_data_parallel_world_size(with_gtp_remat=False) == 2
        assert megatron.get_expert_data_parallel_world_size(with_gtp_remat=False) == 2
        with pytest.raises(FacadeAssertionError, match="gloo"):
            megatron.get_data_parallel_group_gloo()  # GTP makes no gloo companions
        megatron.destroy_model_parallel()
    finally:
        dist.destroy_process_group()


def test_vp_stage_is_checked_as_the_core_checks_it() -> None:
    """A vp_stage outside range(vpp) (range(1) without virtual stages), or a bool, is refused by
    every getter that takes one, with the core's message; valid ones answer as before."""
    _fake(rank=0)
    try:
        megatron.initialize_model_parallel(2, 2, virtual_pipeline_model_parallel_size=2)
        getters = (
            megatron.is_pipeline_first_stage,
            megatron.is_pipeline_last_stage,
            megatron.is_rank_in_embedding_group,
        )
        for getter in getters:
            for bad in (2, -1, True):
                with pytest.raises(TopologyError, match=rf"vp_stage {bad} is not a virtual stage"):
                    getter(ignore_virtual=False, vp_stage=bad)
            with pytest.raises(TopologyError, match=r"valid: an int from 0 to 1 \(range\(vpp\)"):
                getter(vp_stage=2)  # checked even where ignore_virtual ignores it
        assert megatron.is_pipeline_first_stage(ignore_virtual=False, vp_stage=0)
        assert not megatron.is_pipeline_first_stage(ignore_virtual=False, vp_stage=1)
        megatron.set_virtual_pipeline_model_parallel_world_size(4)  # the vpp in force counts
        assert not megatron.is_pipeline_first_stage(ignore_virtual=False, vp_stage=3)
        megatron.destroy_model_parallel()
        megatron.initialize_model_parallel(2, 2)
        with pytest.raises(TopologyError, match=r"vp_stage 1 is not a virtual stage"):
            megatron.is_rank_in_embedding_group(vp_stage=1)
        assert megatron.is_pipeline_first_stage(ignore_virtual=False, vp_stage=0)
        megatron.destroy_model_parallel()
    finally:
        dist.destroy_process_group()
