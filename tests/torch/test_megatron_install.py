"""Megatron-core's own ``parallel_state`` on our groups after ``install()`` (needs megatron-core).

On 8 gloo ranks, for layouts of Megatron's own ``test_parallel_state.py``: Megatron's
``initialize_model_parallel`` first runs as Megatron wrote it, then, after ``install()``, with
the same arguments; every getter of ``parallel_state`` (called on the module and through the
names other Megatron modules imported) must answer the same, from fewer ``new_group`` calls and
communicators. A Megatron ``GPTModel`` built without ``pg_collection`` then runs on our groups and
computes what it computes on Megatron's. ``uninstall()`` restores Megatron's function objects.
"""

from __future__ import annotations

import inspect
import json
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    ps = pytest.importorskip("megatron.core.parallel_state")

import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from tests.torch.oracle import oracle_0_19
from tests.torch.world import as_cpu_host, run_world
from topology import TopologyError
from topology_torch.compat import megatron as facade
from topology_torch.compat.megatron import _install as mi

WORLD = 8

# Layouts of Megatron's test_parallel_state.py on 8 ranks (tp/pp/cp/ep/etp, both orders,
# virtual stages, hierarchical cp, distributed-optimizer instances, no gloo groups).
LAYOUTS: dict[str, dict[str, Any]] = {
    "tp2-pp4": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 4},
    "tp2-pp4-order-pp-before-dp": {
        "tensor_model_parallel_size": 2,
        "pipeline_model_parallel_size": 4,
        "order": "tp-cp-pp-ep-dp",
    },
    "tp2-pp4-vpp2": {
        "tensor_model_parallel_size": 2,
        "pipeline_model_parallel_size": 4,
        "virtual_pipeline_model_parallel_size": 2,
    },
    "tp8": {"tensor_model_parallel_size": 8},
    "pp8": {"pipeline_model_parallel_size": 8},
    "cp8": {"context_parallel_size": 8},
    "tp2-cp4-hcp2x2": {
        "tensor_model_parallel_size": 2,
        "context_parallel_size": 4,
        "hierarchical_context_parallel_sizes": [2, 2],
    },
    "ep8": {"expert_model_parallel_size": 8},
    "etp8": {"expert_tensor_parallel_size": 8},
    "tp2-ep4-order-tp-ep-dp-pp": {
        "tensor_model_parallel_size": 2,
        "expert_model_parallel_size": 4,
        "order": "tp-ep-dp-pp",
    },
    "tp4-ep2-order-tp-pp-ep-dp": {
        "tensor_model_parallel_size": 4,
        "expert_model_parallel_size": 2,
        "order": "tp-pp-ep-dp",
    },
    "tp2-cp2-pp2-ep2-etp1": {
        "tensor_model_parallel_size": 2,
        "context_parallel_size": 2,
        "pipeline_model_parallel_size": 2,
        "expert_model_parallel_size": 2,
        "expert_tensor_parallel_size": 1,
    },
    "tp2-dist-opt2": {"tensor_model_parallel_size": 2, "num_distributed_optimizer_instances": 2},
    "tp2-no-gloo": {"tensor_model_parallel_size": 2, "create_gloo_process_groups": False},
}

# Getters whose arguments select another group: each variant is recorded under its own name.
VARIANTS: dict[str, list[dict[str, Any]]] = {
    "get_data_parallel_group": [
        {"with_context_parallel": True},
        {"with_context_parallel": True, "partial_data_parallel": True},
    ],
    "get_data_parallel_group_gloo": [
        {"with_context_parallel": True},
        {"with_context_parallel": True, "partial_data_parallel": True},
    ],
    "get_data_parallel_world_size": [{"with_context_parallel": True}],
    "get_data_parallel_rank": [{"with_context_parallel": True}],
    "get_data_parallel_src_rank": [{"with_context_parallel": True}],
    "get_tensor_and_data_parallel_group": [{"with_context_parallel": True}],
    "get_amax_reduction_group": [
        {"with_context_parallel": c, "tp_only_amax_red": t}
        for c in (False, True)
        for t in (False, True)
    ],
    "get_expert_data_parallel_group": [{"partial_expert_data_parallel": True}],
    "get_expert_data_parallel_group_gloo": [{"partial_expert_data_parallel": True}],
    "get_expert_data_parallel_rank": [{"partial_expert_data_parallel": True}],
    "get_expert_data_parallel_world_size": [{"partial_expert_data_parallel": True}],
    "get_inter_distributed_optimizer_instance_group": [{"check_initialized": False}],
    "get_embedding_group": [{"check_initialized": False}],
    "get_position_embedding_group": [{"check_initialized": False}],
    "is_pipeline_first_stage": [{"ignore_virtual": False, "vp_stage": v} for v in (0, 1)],
    "is_pipeline_last_stage": [{"ignore_virtual": False, "vp_stage": v} for v in (0, 1)],
    "is_rank_in_embedding_group": [{"ignore_virtual": False, "vp_stage": v} for v in (0, 1)],
}
# Not about groups (buffers, options) or needing arguments no layout here sets.
NOT_GETTERS = {
    "get_nccl_options",
    "get_global_memory_buffer",
    "get_global_symmetric_memory_buffer",
    "get_hybrid_data_context_parallel_groups",
}


def getters() -> dict[str, Callable[[], Any]]:
    """Every getter of parallel_state (and its argument variants), by a readable name."""
    found: dict[str, Callable[[], Any]] = {}
    for name, function in sorted(vars(ps).items()):
        if getattr(function, "__module__", None) != ps.__name__ or name in NOT_GETTERS:
            continue
        if not name.startswith(("get_", "is_", "has_", "model_parallel_is_")):
            continue
        required = [
            p
            for p in inspect.signature(function).parameters.values()
            if p.default is inspect.Parameter.empty
        ]
        if not required:
            found[name] = function
        for kwargs in VARIANTS.get(name, []):
            found[f"{name}({kwargs})"] = lambda f=function, k=kwargs: f(**k)
    return found


def describe(value: Any) -> Any:
    """A getter's answer as JSON: a group by its ranks, lists element-wise."""
    if isinstance(value, dist.ProcessGroup):
        return {"group": dist.get_process_group_ranks(value)}
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    return value


def answers() -> dict[str, Any]:
    """What every getter answers on this rank (an exception by its class)."""
    result: dict[str, Any] = {}
    for name, getter in getters().items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result[name] = describe(getter())
        except Exception as error:  # Megatron asserts for groups a layout does not have
            result[name] = {
                "raises": "AssertionError"
                if isinstance(error, AssertionError)
                else type(error).__name__
            }
    return result


BY_NAME = {  # getters other Megatron modules bound by name at import time
    "megatron.core.tensor_parallel.layers": "get_tensor_model_parallel_rank",
    "megatron.core.tensor_parallel.random": "get_expert_model_parallel_rank",
    "megatron.core.transformer.attention": "get_data_parallel_group",
}


def bound_answers() -> dict[str, Any]:
    """What the getters Megatron modules imported by name answer."""
    import importlib

    result = {}
    for module, name in BY_NAME.items():
        result[f"{module}.{name}"] = describe(getattr(importlib.import_module(module), name)())
    return result


@contextmanager
def counting() -> Iterator[dict[str, Any]]:
    """Count ``new_group`` calls and the distinct communicators this rank joined."""
    tally: dict[str, Any] = {"calls": 0, "groups": {}}
    original = dist.new_group

    def new_group(*args: Any, **kwargs: Any) -> Any:
        tally["calls"] += 1
        group = original(*args, **kwargs)
        if isinstance(group, dist.ProcessGroup):
            tally["groups"][id(group)] = group
        return group

    dist.new_group = new_group
    try:
        yield tally
    finally:
        dist.new_group = original


def run(arguments: dict[str, Any]) -> dict[str, Any]:
    """Initialize Megatron's state with ``arguments``, record every answer, destroy."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with counting() as tally:
            ps.initialize_model_parallel(**arguments)
            record = {"answers": answers(), "bound": bound_answers()}
        ps.destroy_model_parallel()
    record["calls"] = tally["calls"]
    record["communicators"] = len(tally["groups"])
    record["initialized_after_destroy"] = ps.is_initialized() or ps.model_parallel_is_initialized()
    return record


def record_layouts(rank: int, world_size: int, folder: str) -> None:
    """On each rank: every layout under Megatron's groups, then under ours."""
    records: dict[str, Any] = {}
    for name, arguments in LAYOUTS.items():
        megatron = run(arguments)
        facade.install()
        try:
            ours = run(arguments)
        finally:
            facade.uninstall()
        records[name] = {"megatron": megatron, "ours": ours}
    Path(folder, f"{rank}.json").write_text(json.dumps(records))


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Any]:
    """Rank -> layout -> {"megatron": record, "ours": record} from one 8-rank gloo world."""
    folder = tmp_path_factory.mktemp("megatron-install")
    run_world(WORLD, record_layouts, str(folder), timeout=900)
    return {r: json.loads((folder / f"{r}.json").read_text()) for r in range(WORLD)}


def each(records: dict[int, Any]) -> Iterator[tuple[int, str, Any, Any]]:
    for rank, layouts in records.items():
        for name, both in layouts.items():
            yield rank, name, both["megatron"], both["ours"]


# -- the getters answer with our groups -------------------------------------------------------


def test_every_getter_answers_as_under_megatrons_own_groups(records: dict[int, Any]) -> None:
    """For every layout and rank, every getter of parallel_state answers as Megatron's own."""
    for rank, name, megatron, ours in each(records):
        assert megatron["answers"].keys() == ours["answers"].keys()
        for getter, expected in megatron["answers"].items():
            assert ours["answers"][getter] == expected, (name, rank, getter)


def test_getters_other_modules_imported_by_name_answer_alike(records: dict[int, Any]) -> None:
    """Getters bound by ``from parallel_state import ...`` in Megatron modules answer alike."""
    for rank, name, megatron, ours in each(records):
        assert ours["bound"] == megatron["bound"], (name, rank)


def test_our_groups_are_groups_not_errors(records: dict[int, Any]) -> None:
    """The comparison is not vacuous: the tensor-parallel group getter returns a group."""
    for rank, name, _, ours in each(records):
        assert "group" in ours["answers"]["get_tensor_model_parallel_group"], (name, rank)


def test_fewer_new_group_calls_than_megatron(records: dict[int, Any]) -> None:
    """Each rank makes fewer new_group calls than Megatron's initialize_model_parallel."""
    for rank, name, megatron, ours in each(records):
        assert ours["calls"] < megatron["calls"], (name, rank, ours["calls"], megatron["calls"])


def test_fewer_communicators_than_megatron(records: dict[int, Any]) -> None:
    """Each rank joins fewer distinct communicators than under Megatron's own groups."""
    for rank, name, megatron, ours in each(records):
        assert ours["communicators"] < megatron["communicators"], (name, rank)


def test_destroy_model_parallel_leaves_megatron_uninitialized(records: dict[int, Any]) -> None:
    """After Megatron's destroy_model_parallel, parallel_state reports no groups."""
    for rank, name, _, ours in each(records):
        assert not ours["initialized_after_destroy"], (name, rank)


# -- a Megatron model built without pg_collection -------------------------------------------------


def gpt_loss(layer_spec: Any) -> list[float]:
    """Build Megatron's GPTModel (tiny, on CPU, no pg_collection) and return its loss."""
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    torch.manual_seed(1234)
    config = TransformerConfig(
        num_layers=2,
        hidden_size=16,
        num_attention_heads=4,
        use_cpu_initialization=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        tensor_model_parallel_size=ps.get_tensor_model_parallel_world_size(),
    )
    model = GPTModel(
        config=config, transformer_layer_spec=layer_spec, vocab_size=64, max_sequence_length=8
    )
    tokens = torch.randint(0, 64, (2, 8))
    positions = torch.arange(8).expand(2, 8)
    loss = model(tokens, positions, None, labels=tokens)
    loss.sum().backward()
    return [float(v) for v in loss.detach().flatten()]


def mlp_only_spec() -> Any:
    """Megatron's local GPT layer without attention (its attention allocates on CUDA)."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_layer import (
        TransformerLayer,
        TransformerLayerSubmodules,
    )

    local = get_gpt_layer_local_spec().submodules
    return ModuleSpec(
        module=TransformerLayer,
        submodules=TransformerLayerSubmodules(
            pre_mlp_layernorm=local.pre_mlp_layernorm, mlp=local.mlp, mlp_bda=local.mlp_bda
        ),
    )


def model_on_both(rank: int, world_size: int, folder: str) -> None:
    """Loss of one GPTModel under Megatron's groups and under ours; the full model builds."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    as_cpu_host()
    result: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in ("megatron", "ours"):
            if name == "ours":
                facade.install()
            ps.initialize_model_parallel(tensor_model_parallel_size=2)
            result[name] = gpt_loss(mlp_only_spec())
            result[f"{name}-tp"] = dist.get_process_group_ranks(
                ps.get_tensor_model_parallel_group()
            )
            if name == "ours":
                result["ours-held"] = facade.model_parallel_is_initialized()
                full = get_gpt_layer_local_spec()  # builds; its forward needs CUDA (see below)
                from megatron.core.models.gpt.gpt_model import GPTModel
                from megatron.core.transformer.transformer_config import TransformerConfig

                GPTModel(
                    config=TransformerConfig(
                        num_layers=1,
                        hidden_size=16,
                        num_attention_heads=4,
                        use_cpu_initialization=True,
                        tensor_model_parallel_size=2,
                    ),
                    transformer_layer_spec=full,
                    vocab_size=64,
                    max_sequence_length=8,
                )
            ps.destroy_model_parallel()
        facade.uninstall()
    Path(folder, f"{rank}.json").write_text(json.dumps(result))


@pytest.fixture(scope="module")
def model_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Any]:
    """Rank -> losses of the tiny GPT under both sets of groups (4 gloo ranks, tp=2, dp=2)."""
    pytest.importorskip("megatron.core.models.gpt.gpt_model")
    folder = tmp_path_factory.mktemp("megatron-model")
    run_world(4, model_on_both, str(folder), timeout=600)
    return {r: json.loads((folder / f"{r}.json").read_text()) for r in range(4)}


def test_gpt_model_runs_on_our_groups_without_pg_collection(model_runs: dict[int, Any]) -> None:
    """GPTModel built without pg_collection runs forward and backward on our groups."""
    for rank, result in model_runs.items():
        assert result["ours-held"], rank
        assert result["ours-tp"] == [rank - rank % 2, rank - rank % 2 + 1]


def test_gpt_model_computes_what_it_computes_on_megatrons_groups(
    model_runs: dict[int, Any],
) -> None:
    """The same seed gives the same loss under our groups as under Megatron's."""
    for rank, result in model_runs.items():
        assert result["ours"] == result["megatron"], rank


# -- install / uninstall, in this process ---------------------------------------------------------


@pytest.fixture
def installed() -> Iterator[None]:
    """install() for one test; uninstall() after it whatever happens."""
    facade.install()
    try:
        yield
    finally:
        if mi._live:
            ps.destroy_model_parallel()
        facade.uninstall()


@contextmanager
def fake_world(rank: int = 0, world_size: int = WORLD) -> Iterator[None]:
    """A fake default group (no data moves) in this process."""
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def module_functions() -> dict[str, Any]:
    """parallel_state's functions and other globals, by identity."""
    return dict(vars(ps))


def test_uninstall_restores_the_same_function_objects() -> None:
    """After install() and uninstall(), every name of parallel_state is the same object."""
    before = module_functions()
    facade.install()
    assert ps.initialize_model_parallel is not before["initialize_model_parallel"]
    facade.uninstall()
    after = module_functions()
    assert after.keys() == before.keys()
    assert all(after[name] is before[name] for name in before)


def test_install_is_idempotent() -> None:
    """A second install() changes nothing; one uninstall() restores Megatron."""
    original = ps.initialize_model_parallel
    facade.install()
    installed = ps.initialize_model_parallel
    facade.install()
    assert ps.initialize_model_parallel is installed and mi.is_installed()
    facade.uninstall()
    assert ps.initialize_model_parallel is original and not mi.is_installed()


def test_uninstall_without_install_is_a_no_op() -> None:
    """uninstall() when nothing is installed leaves parallel_state alone."""
    before = module_functions()
    facade.uninstall()
    assert all(module_functions()[name] is value for name, value in before.items())


def test_modules_that_bound_the_functions_by_name_are_patched_and_restored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A module that did ``from parallel_state import destroy_model_parallel`` follows."""
    trainer = types.ModuleType("trainer_that_bound_destroy")
    trainer.destroy_model_parallel = ps.destroy_model_parallel  # type: ignore[attr-defined]
    original = ps.destroy_model_parallel
    monkeypatch.setitem(sys.modules, trainer.__name__, trainer)
    facade.install()
    try:
        assert trainer.destroy_model_parallel is ps.destroy_model_parallel  # type: ignore[attr-defined]
        assert trainer.destroy_model_parallel is not original  # type: ignore[attr-defined]
    finally:
        facade.uninstall()
    assert trainer.destroy_model_parallel is original  # type: ignore[attr-defined]


def test_install_without_megatron_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without megatron-core, install() says which package to install."""
    monkeypatch.setitem(sys.modules, "megatron.core.parallel_state", None)
    with pytest.raises(TopologyError, match=r"needs megatron-core.*pip install"):
        facade.install()
    assert not mi.is_installed()


def test_install_refuses_an_aliased_parallel_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """When parallel_state is aliased to our façade (a peer harness), install() refuses."""
    monkeypatch.setitem(sys.modules, "megatron.core.parallel_state", facade)
    with pytest.raises(TopologyError, match=r"aliased to 'topology_torch\.compat\.megatron'"):
        facade.install()


def _hybrid_groups() -> dict[int, list[int]]:
    """What Megatron's getter answers for rank 5 of 8 (dp 8: hybrid sizes 2 and 4)."""
    ps.initialize_model_parallel(hybrid_context_parallel=True, create_gloo_process_groups=False)
    return {
        size: dist.get_process_group_ranks(
            ps.get_hybrid_data_context_parallel_groups(group_size=size)
        )
        for size in (2, 4)
    }


def test_hybrid_context_parallel_builds_our_groups_for_megatrons_getter() -> None:
    """hybrid_context_parallel=True (refused before issue 33): Megatron's own getter answers, on
    our groups (made on first use), the ranks it answers on Megatron's own; each joins
    Megatron's ``_global_process_group_list`` as its ``create_group`` lists its own; destroy
    destroys them and leaves an empty dict; an odd dp * cp is Megatron's AssertionError."""
    with fake_world(rank=5), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = _hybrid_groups()
        ps.destroy_model_parallel()
        ps._HYBRID_DP_CP_GROUPS.clear()  # Megatron's destroy keeps it
        facade.install()
        try:
            assert _hybrid_groups() == theirs == {2: [4, 5], 4: [4, 5, 6, 7]}
            assert dict(ps._HYBRID_DP_CP_GROUPS).keys() == {2, 4}
            made = list(ps._HYBRID_DP_CP_GROUPS.values())
            listed = ps._global_process_group_list
            assert [g for g in listed if any(g is m for m in made)] == made  # once each
            ps.destroy_model_parallel()
            assert ps._HYBRID_DP_CP_GROUPS == {} and ps._global_process_group_list is None
            assert not [g for g in made if g in dist.distributed_c10d._world.pg_map]
            with pytest.raises(AssertionError, match=r"even dp \* cp, got dp\(1\) \* cp\(1\)"):
                ps.initialize_model_parallel(
                    tensor_model_parallel_size=8, hybrid_context_parallel=True
                )
        finally:
            if mi._live:
                ps.destroy_model_parallel()
            facade.uninstall()
    assert not ps.is_initialized()


@pytest.mark.usefixtures("installed")
def test_uninstall_refuses_while_our_groups_are_alive() -> None:
    """uninstall() between initialize and destroy says to destroy first, and keeps working."""
    with fake_world():
        ps.initialize_model_parallel(tensor_model_parallel_size=2)
        with pytest.raises(AssertionError, match="destroy_model_parallel"):
            facade.uninstall()
        assert mi.is_installed() and ps.is_initialized()
        ps.destroy_model_parallel()
        assert not facade.model_parallel_is_initialized()


@pytest.mark.usefixtures("installed")
def test_initialize_twice_is_refused_as_megatron_does() -> None:
    """A second initialize_model_parallel raises AssertionError, as Megatron's does."""
    with fake_world():
        ps.initialize_model_parallel(tensor_model_parallel_size=2)
        with pytest.raises(AssertionError, match="already initialized"):
            ps.initialize_model_parallel(tensor_model_parallel_size=2)
        ps.destroy_model_parallel()


@pytest.mark.usefixtures("installed")
def test_every_global_megatron_fills_is_filled_and_emptied() -> None:
    """initialize fills each group global of this rank; destroy empties all of them."""
    with fake_world(rank=3):
        ps.initialize_model_parallel(tensor_model_parallel_size=2, pipeline_model_parallel_size=2)
        assert ps._TENSOR_MODEL_PARALLEL_GLOBAL_RANKS == [2, 3]
        assert ps._PIPELINE_GLOBAL_RANKS == [3, 7]
        assert ps._global_process_group_list[0] is None
        ps.destroy_model_parallel()
        assert all(getattr(ps, name) is None for name in mi.filled_globals())
        assert ps._global_process_group_list is None


@pytest.mark.usefixtures("installed")
def test_the_facades_own_destroy_leaves_megatron_uninitialized() -> None:
    """compat.megatron.destroy_model_parallel() after install() empties Megatron's globals too."""
    with fake_world():
        ps.initialize_model_parallel(tensor_model_parallel_size=2)
        facade.destroy_model_parallel()
        assert not ps.model_parallel_is_initialized() and not ps.is_initialized()
        assert all(getattr(ps, name) is None for name in mi.filled_globals())
        ps.initialize_model_parallel(tensor_model_parallel_size=2)  # and it initializes again
        assert ps.get_tensor_model_parallel_world_size() == 2
        ps.destroy_model_parallel()


@pytest.mark.usefixtures("installed")
def test_sizes_that_do_not_fit_raise_runtime_error_before_already_initialized() -> None:
    """With our groups alive, sizes that do not fit are Megatron's RuntimeError first."""
    with fake_world():
        ps.initialize_model_parallel()
        with pytest.raises(RuntimeError, match=r"world_size \(8\) is not divisible"):
            ps.initialize_model_parallel(tensor_model_parallel_size=16)
        with pytest.raises(RuntimeError, match="virtual_pipeline_model_parallel_size"):
            ps.initialize_model_parallel(virtual_pipeline_model_parallel_size=2)
        with pytest.raises(AssertionError, match="already initialized"):
            ps.initialize_model_parallel()
        ps.destroy_model_parallel()


def test_sizes_that_do_not_fit_raise_runtime_error_over_megatrons_own_groups() -> None:
    """Megatron's own groups alive, then install(): bad sizes still raise RuntimeError first."""
    with fake_world():
        ps.initialize_model_parallel(create_gloo_process_groups=False)  # no gloo under fake
        facade.install()
        try:
            with pytest.raises(RuntimeError, match=r"world_size \(8\) is not divisible"):
                ps.initialize_model_parallel(pipeline_model_parallel_size=16)
            with pytest.raises(AssertionError, match="already initialized"):
                ps.initialize_model_parallel()
        finally:
            ps.destroy_model_parallel()
            facade.uninstall()


def test_install_fills_exactly_what_megatron_assigns() -> None:
    """The globals install() fills are read from the installed initialize_model_parallel."""
    facade.install()
    try:
        assert set(mi.filled_globals()) == set(
            mi.assigned_globals(ps.initialize_model_parallel.__wrapped__)
        )
        assert "_DATA_PARALLEL_GROUP_WITH_CP_AG" in mi.filled_globals()  # 0.16.1 has it
    finally:
        facade.uninstall()


def test_install_refuses_a_megatron_that_sets_an_unknown_global(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A future initialize_model_parallel that assigns a global we cannot fill is refused."""

    def initialize_model_parallel(tensor_model_parallel_size: int = 1) -> None:
        global _FUTURE_GROUP
        _FUTURE_GROUP = tensor_model_parallel_size

    monkeypatch.setattr(ps, "initialize_model_parallel", initialize_model_parallel)
    with pytest.raises(TopologyError, match=r"sets _FUTURE_GROUP, which install\(\) does not"):
        facade.install()
    assert not mi.is_installed()


# -- megatron-core 0.19.2, in a subprocess (two megatron versions cannot share one) --------------

COMPARE_0_19 = """
import json, sys, warnings
warnings.simplefilter("ignore")
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
import megatron.core.parallel_state as ps
from megatron.core.package_info import __version__
from topology_torch.compat import megatron as facade
from topology_torch.compat.megatron import _install as mi

def describe(value):
    if isinstance(value, dist.ProcessGroup):
        return {"group": dist.get_process_group_ranks(value)}
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    return value

def compare(layout, rank):
    layout["create_gloo_process_groups"] = False  # the fake backend makes no gloo groups
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=8)
    names = mi.assigned_globals(ps.initialize_model_parallel)
    ps.initialize_model_parallel(**layout)
    megatron = {name: describe(getattr(ps, name)) for name in names}
    ps.destroy_model_parallel()
    facade.install()
    ps.initialize_model_parallel(**layout)
    ours = {name: describe(getattr(ps, name)) for name in names}
    filled = list(mi.filled_globals())
    getters = [ps.get_gtp_weight_remat_world_size(), ps.get_expert_gtp_weight_remat_world_size(),
               describe(ps.get_data_parallel_group())]
    ps.destroy_model_parallel()
    after = [name for name in names if getattr(ps, name) is not None]
    facade.uninstall()
    dist.destroy_process_group()
    return {"version": __version__, "names": list(names), "filled": filled,
            "megatron": megatron, "ours": ours, "getters": getters, "after": after}

print(json.dumps([compare(layout, rank) for layout, rank in json.loads(sys.argv[1])]))
"""

LAYOUTS_0_19: dict[str, dict[str, Any]] = {
    "tp2-pp2": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2},
    "tp2-cp2-ep2-etp1": {
        "tensor_model_parallel_size": 2,
        "context_parallel_size": 2,
        "expert_model_parallel_size": 2,
        "expert_tensor_parallel_size": 1,
    },
    "dist-opt2": {"num_distributed_optimizer_instances": 2},
    "gtp2-egtp2": {
        "tensor_model_parallel_size": 2,
        "gtp_remat_size": 2,
        "expert_model_parallel_size": 2,
        "expert_gtp_remat_size": 2,
    },
}


RANKS_0_19 = (0, 5)


@cache
def compared_0_19() -> dict[tuple[str, int], dict[str, Any]]:
    """(layout name, rank) -> one fake rank under megatron-core 0.19.2: its globals under its
    groups and under ours (every layout and rank in one subprocess, one after another)."""
    import os
    import subprocess

    oracle = oracle_0_19()
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{oracle}{os.pathsep}{root / 'src'}"}
    env["NO_VCS_VERSION"] = "1"
    cases = [(name, rank) for name in sorted(LAYOUTS_0_19) for rank in RANKS_0_19]
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            COMPARE_0_19,
            json.dumps([(LAYOUTS_0_19[name], rank) for name, rank in cases]),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    return dict(zip(cases, results, strict=True))


@pytest.mark.parametrize("name", sorted(LAYOUTS_0_19))
def test_megatron_0_19_globals_under_install_equal_its_own(name: str) -> None:
    """Under 0.19.2, install() fills exactly the globals its initialize_model_parallel sets,
    each with the same ranks on every rank, and destroy empties them."""
    for rank in RANKS_0_19:
        result = compared_0_19()[name, rank]
        assert result["version"] == "0.19.2"
        assert sorted(result["filled"]) == sorted(result["names"])
        assert "_GTP_WEIGHT_REMAT_GROUP" in result["names"]
        assert "_DATA_PARALLEL_GROUP_WITH_CP_AG" not in result["names"]
        for global_name, expected in result["megatron"].items():
            assert result["ours"][global_name] == expected, (name, rank, global_name)
        assert result["after"] == [], (name, rank)
