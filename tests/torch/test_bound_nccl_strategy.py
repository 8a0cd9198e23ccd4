"""The strategy choice on torch's recommended launch: an NCCL default group bound to a device.

CI has no GPU, so a stand-in presents that default group to the choice: ``dist.get_backend()``
answers ``"nccl"`` and the default group's ``bound_device_id`` is a CUDA device, over a ``fake``
world of 8 (no data moves). On it ``local`` is refused (torch splits every new communicator from
the bound default one, which needs every rank) and ``auto`` must pick ``split``. Every façade's
creation is intercepted at ``ProcessGroups.create`` (or ``torch.distributed.new_group``) and must
ask for a strategy this default group allows; ``install()`` must ask for ``auto``.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from topology import TopologyError
from topology_torch import _creation
from topology_torch._process_groups import ProcessGroups, _unagreed_strategy
from topology_torch.compat import deepspeed, ezpz, fairscale, megatron, ml, torchtitan

WORLD = 8


class Intercepted(Exception):
    """Raised by the stand-in creation once it has recorded what it was asked for."""


class Bound:
    """The default group, answering ``bound_device_id`` as one bound to ``cuda:0``."""

    bound_device_id = torch.device("cuda", 0)

    def __init__(self, group: Any) -> None:
        self._group = group

    def __getattr__(self, name: str) -> Any:
        return getattr(self._group, name)


@pytest.fixture
def bound_nccl(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fake world of 8 that answers as an NCCL default group bound to ``cuda:0``."""
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    default = Bound(dist.distributed_c10d._get_default_group())
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    monkeypatch.setattr(dist.distributed_c10d, "_get_default_group", lambda: default)
    try:
        yield
    finally:
        monkeypatch.undo()
        dist.destroy_process_group()


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The strategies ``ProcessGroups.create`` is asked for (resolved as it would resolve them)."""
    chosen: list[str] = []

    def create(topology: Any, **kwargs: Any) -> Any:
        strategy = kwargs.get("strategy", "auto")
        agreed = kwargs.get("agree", True)
        chosen.append(
            _creation.resolve_strategy(strategy) if agreed else _unagreed_strategy(strategy)
        )
        raise Intercepted

    monkeypatch.setattr(ProcessGroups, "create", staticmethod(create))
    return chosen


@pytest.mark.usefixtures("bound_nccl")
def test_auto_picks_split_on_a_bound_nccl_default_group() -> None:
    """resolve_strategy('auto') is 'split' there, and 'split' itself is allowed."""
    assert _creation.resolve_strategy("auto") == "split"
    assert _creation.resolve_strategy("split") == "split"
    assert _creation.resolve_strategy("all") == "all"


@pytest.mark.usefixtures("bound_nccl")
def test_local_is_refused_on_a_bound_nccl_default_group() -> None:
    """'local' cannot work there, and the refusal names 'auto'."""
    with pytest.raises(TopologyError, match=r"strategy 'local' cannot .* bound to a device"):
        _creation.resolve_strategy("local")


def test_install_asks_for_auto() -> None:
    """The installed initialize_model_parallel passes strategy 'auto' (never a fixed one)."""
    signature = inspect.signature(megatron.initialize_model_parallel)
    arguments = signature.bind(tensor_model_parallel_size=2)
    arguments.apply_defaults()
    from topology_torch.compat.megatron import _install

    assert _install._facade_arguments(arguments)["strategy"] == "auto"


def test_facade_defaults_to_auto() -> None:
    """The façade's own initialize_model_parallel defaults to 'auto'."""
    parameter = inspect.signature(megatron.initialize_model_parallel).parameters["strategy"]
    assert parameter.default == "auto"


@pytest.mark.usefixtures("bound_nccl")
@pytest.mark.parametrize(
    "create",
    [
        pytest.param(lambda: megatron.initialize_model_parallel(2, 2), id="megatron"),
        pytest.param(lambda: fairscale.initialize_model_parallel(2, 2), id="fairscale"),
        pytest.param(lambda: ezpz.initialize_tensor_parallel(2, 2), id="ezpz"),
        pytest.param(lambda: ml.init_parallelism(2, 2), id="ml"),
        pytest.param(
            lambda: torchtitan.ParallelDims(
                dp_replicate=1, dp_shard=-1, cp=1, tp=2, pp=2, ep=1, world_size=WORLD
            ).build_mesh(),
            id="torchtitan",
        ),
    ],
)
def test_every_facade_asks_for_a_strategy_the_bound_group_allows(
    create: Any, asked: list[str]
) -> None:
    """Each façade's creation resolves to a strategy a bound NCCL default group runs."""
    with warnings.catch_warnings(), pytest.raises(Intercepted):
        warnings.simplefilter("ignore")
        create()
    assert asked and all(strategy in ("split", "all") for strategy in asked), asked


@pytest.mark.usefixtures("bound_nccl")
def test_megatron_core_under_install_asks_for_split(asked: list[str]) -> None:
    """Megatron's own initialize_model_parallel, installed, resolves to 'split' there."""
    ps = pytest.importorskip("megatron.core.parallel_state")
    megatron.install()
    try:
        with pytest.raises(Intercepted):
            ps.initialize_model_parallel(tensor_model_parallel_size=2)
    finally:
        megatron.uninstall()
    assert asked == ["split"]


@pytest.mark.usefixtures("bound_nccl")
def test_deepspeed_grid_joins_every_new_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSpeed's grid calls new_group on every rank, never local synchronization."""
    calls: list[dict[str, Any]] = []

    def new_group(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        raise Intercepted

    monkeypatch.setattr(dist, "new_group", new_group)
    with pytest.raises(Intercepted):
        deepspeed.PipelineParallelGrid(deepspeed.PipeModelDataParallelTopology(2, 2, 2))
    assert calls and not any(c.get("use_local_synchronization") for c in calls)
