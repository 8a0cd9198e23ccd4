"""Creation cost at large world sizes under the fake backend: calls and communicators."""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch.distributed as dist

from tests.torch.world import fake_world
from topology import Topology
from topology_torch import ProcessGroups

HAS_MEGATRON = importlib.util.find_spec("megatron") is not None


@contextmanager
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, ...]]]:
    """Record ``torch.distributed.new_group`` calls (one entry per call: its sorted ranks)."""
    calls: list[tuple[int, ...]] = []
    original = dist.new_group

    def new_group(*args: Any, **kwargs: Any) -> Any:
        ranks = args[0] if args else kwargs.get("ranks")
        calls.append(tuple(sorted(ranks)) if ranks is not None else ())
        return original(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(dist, "new_group", new_group)
        yield calls


def _own_sets(topo: Topology, rank: int) -> set[tuple[int, ...]]:
    """The distinct rank sets ``rank`` belongs to, over every kind (independent of the adapter)."""
    return {topo.group_of(rank, kind) for kind in topo.kinds if topo.has_group(rank, kind)}


def test_local_creates_a_million_rank_layout_with_one_call_per_distinct_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Strategy local at W = 2^20 (tp8 pp4): one call per distinct multi-rank set of this rank.

    How long that takes is measured in benchmarks/bench_groups.py, not asserted here.
    """
    world, rank = 2**20, 123_457
    topo = Topology(world, tp=8, pp=4)
    with fake_world(world, rank), counting(monkeypatch) as calls:
        groups = ProcessGroups.create(topo, strategy="local")
        multi = {s for s in _own_sets(topo, rank) if len(s) > 1}
        assert len(calls) == groups.calls == len(multi)
        assert sorted(calls) == sorted(multi)
        groups.destroy()


def test_local_calls_do_not_grow_with_the_world(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same rank makes the same number of calls at W = 2^10, 2^14 and 2^18."""
    counts = []
    for world in (2**10, 2**14, 2**18):
        with fake_world(world, 3), counting(monkeypatch) as calls:
            ProcessGroups.create(
                Topology(world, tp=2, cp=2, ep=4, pp=4), strategy="local"
            ).destroy()
            counts.append(len(calls))
    assert counts[0] == counts[1] == counts[2] > 0, counts


def test_all_calls_once_per_distinct_multi_rank_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Strategy all: calls equal the number of distinct multi-rank sets over all kinds."""
    world = 2**10
    topo = Topology(world, tp=8, pp=4)
    distinct = {g for kind in topo.kinds for g in topo.groups(kind) if 1 < len(g) < world}
    with fake_world(world, 0), counting(monkeypatch) as calls:
        ProcessGroups.create(topo, strategy="all").destroy()
    assert len(calls) == len(distinct)


def test_a_rank_holds_one_communicator_per_distinct_rank_set() -> None:
    """tp8 pp4: a rank holds as many communicators as distinct rank sets it is in (about 7)."""
    world, rank = 2**12, 9
    topo = Topology(world, tp=8, pp=4)
    with fake_world(world, rank):
        groups = ProcessGroups.create(topo, strategy="local")
        for kind in topo.kinds:
            groups.group(kind)  # make the lazy singleton too
        own = _own_sets(topo, rank)
        assert groups.communicators == len(own) <= 7
        groups.destroy()


@pytest.mark.skipif(not HAS_MEGATRON, reason="megatron-core is not installed")
def test_all_needs_at_most_a_quarter_of_megatrons_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """tp8 pp4 at W = 2^10: strategy all calls new_group at most 1/4 as often as Megatron."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core import parallel_state
    world = 2**10
    with fake_world(world, 0), counting(monkeypatch) as theirs:
        parallel_state.initialize_model_parallel(8, 4, create_gloo_process_groups=False)
        parallel_state.destroy_model_parallel()
    with fake_world(world, 0), counting(monkeypatch) as ours:
        ProcessGroups.create(Topology(world, tp=8, pp=4), strategy="all").destroy()
    assert 4 * len(ours) <= len(theirs), (len(ours), len(theirs))
