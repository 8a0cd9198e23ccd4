"""ProcessGroups on real spawned gloo worlds, and creation order pinned under the fake backend."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from tests.torch.world import fake_world, run_world
from topology import Topology, TopologyError
from topology_torch import ProcessGroups

LAYOUTS_8: list[dict[str, Any]] = [
    {"tp": 2, "pp": 2},
    {"tp": 2, "cp": 2, "pp": 2},
    {"tp": 2, "ep": 2, "etp": 1, "pp": 2},
    {"cp": 4, "hcp_sizes": (2, 2), "pp": 2},
    {"tp": 2, "dist_opt_instances": 2, "ep": 2},
    {"tp": 2, "pp": 2, "order": "tp-pp-dp"},
    {"pp": 4, "embedding_stages": (0, 1), "position_embedding_stages": (0, 1)},
]


def _expected_members_sum(members: tuple[int, ...]) -> int:
    return sum(2**m for m in members)


def _check_groups(groups: ProcessGroups, rank: int) -> None:
    """Every kind: torch's ranks, group rank and an all-reduce agree with the core."""
    topo = groups.topology
    for kind in topo.kinds:
        if not topo.has_group(rank, kind):
            with pytest.raises(TopologyError, match="belongs to no"):
                groups.group(kind)
            continue
        members = topo.group_of(rank, kind)
        group = groups.group(kind)
        assert tuple(dist.get_process_group_ranks(group)) == members, (kind, members)
        assert dist.get_rank(group) == members.index(rank) == groups.rank(kind), kind
        assert groups.ranks(kind) == members and groups.size(kind) == len(members)
        value = torch.tensor([2**rank], dtype=torch.int64)
        dist.all_reduce(value, group=group)
        assert value.item() == _expected_members_sum(members), (kind, value.item(), members)
    companion = groups.gloo_group("dp-cp")
    assert tuple(dist.get_process_group_ranks(companion)) == topo.group_of(rank, "dp-cp")


def _every_layout(rank: int, world_size: int) -> None:
    for layout in LAYOUTS_8:
        for strategy in ("local", "all"):
            topo = Topology(world_size, **layout)
            groups = ProcessGroups.create(topo, strategy=strategy)
            _check_groups(groups, rank)
            distinct = {topo.group_of(rank, k) for k in topo.kinds if topo.has_group(rank, k)}
            # every distinct rank set is one communicator; the whole world is the default group
            made = {s for s in distinct if 1 < len(s) < world_size}
            single = any(len(s) == 1 for s in distinct)  # made on first use, above
            assert groups.communicators == len(made) + single, (layout, strategy, distinct)
            groups.destroy()


def test_every_kind_all_reduces_over_exactly_its_members() -> None:
    """On 8 gloo ranks, each kind's group holds the core's ranks and sums exactly them."""
    run_world(8, _every_layout)


def _sharing(rank: int, world_size: int) -> None:
    topo = Topology(world_size, tp=2)
    with ProcessGroups.create(topo) as groups:
        assert groups.strategy == "local"  # what auto picks for gloo
        assert groups.group("dp-cp") is groups.group("dp")  # cp = 1
        assert groups.group("etp") is groups.group("tp") is groups.group("mp")
        assert groups.group("tp-dp-cp") is dist.group.WORLD  # pp = 1: the whole world
        assert groups.gloo_group("dp-cp") is groups.group("dp")  # a gloo group is its companion
        assert groups.group("cp") is groups.group("ep") is groups.group("pp")  # one singleton
        value = torch.tensor([rank + 1.0])
        dist.all_reduce(value, group=groups.group("cp"))
        assert value.item() == rank + 1.0


def test_identical_rank_sets_share_one_communicator() -> None:
    """dp-cp is dp, etp is tp, the world is WORLD, and all singletons are one group."""
    run_world(4, _sharing)


def _uneven_history(rank: int, world_size: int) -> None:
    extra = None
    if rank in (0, 1):  # ranks 0 and 1 register one more group than ranks 2 and 3
        extra = dist.new_group([0, 1], use_local_synchronization=True)
    groups = ProcessGroups.create(Topology(world_size, tp=2), strategy="local")
    assert groups.strategy == "local"
    value = torch.tensor([2**rank], dtype=torch.int64)
    dist.all_reduce(value, group=groups.group("dp"))  # (0, 2) and (1, 3) span both histories
    assert value.item() == sum(2**m for m in groups.ranks("dp"))
    groups.destroy()
    if extra is not None:
        dist.destroy_process_group(extra)


def test_local_groups_rendezvous_although_ranks_registered_different_numbers_of_groups() -> None:
    """torch names a local group by the count of groups a rank holds; ours do not hang on it."""
    run_world(4, _uneven_history)


def _disagree(rank: int, world_size: int) -> None:
    topo = Topology(world_size, tp=4 if rank == 3 else 2)
    with pytest.raises(TopologyError, match=r"^rank 3 called ProcessGroups.create with"):
        ProcessGroups.create(topo)
    groups = ProcessGroups.create(Topology(world_size, tp=2))
    groups.verify()
    groups.destroy()


def test_ranks_with_different_layouts_fail_fast_naming_them() -> None:
    """A rank launched with another layout makes every rank raise, naming it, not hang."""
    run_world(4, _disagree)


def _registry() -> dict[str, Any]:
    world = c10d._world
    return {
        "pg_map": set(world.pg_map),
        "pg_names": dict(world.pg_names),
        "pg_group_ranks": set(world.pg_group_ranks),
        "pg_backend_config": set(world.pg_backend_config),
        "pg_to_tag": dict(world.pg_to_tag),
        "tags_to_pg": {k: list(v) for k, v in world.tags_to_pg.items()},
    }


def _cycles(rank: int, world_size: int) -> None:
    before = _registry()
    for cycle in range(10):
        strategy = ("local", "all")[cycle % 2]
        groups = ProcessGroups.create(Topology(world_size, tp=2, pp=2), strategy=strategy)
        _ = groups.group("cp")  # a lazily made singleton is released too
        value = torch.ones(1)
        dist.all_reduce(value, group=groups.group("tp-pp"))
        assert value.item() == 4
        groups.destroy()
        assert _registry() == before, cycle
    with pytest.raises(TopologyError, match="were destroyed"):
        groups.group("tp")


def test_ten_create_destroy_cycles_leave_torch_registry_as_it_was() -> None:
    """After destroy, torch's process-group registry equals its state before create."""
    run_world(4, _cycles)


# -- in-process, fake backend -----------------------------------------------------------------


@contextmanager
def recording(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[tuple[int, ...], bool]]]:
    """Record every ``new_group`` call as (ranks, use_local_synchronization)."""
    calls: list[tuple[tuple[int, ...], bool]] = []
    original = dist.new_group

    def new_group(ranks: Any = None, *args: Any, **kwargs: Any) -> Any:
        calls.append((tuple(ranks), bool(kwargs.get("use_local_synchronization"))))
        return original(ranks, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(dist, "new_group", new_group)
        yield calls


def _distinct_in_order(topo: Topology) -> list[tuple[int, ...]]:
    """Independent formulation: Megatron's kind order, each new multi-rank set once."""
    seen: set[tuple[int, ...]] = set()
    order: list[tuple[int, ...]] = []
    for kind in topo.kinds:
        for group in topo.groups(kind):
            if 1 < len(group) < topo.world_size and group not in seen:
                seen.add(group)
                order.append(group)
    return order


@pytest.mark.parametrize(
    "layout",
    [{"tp": 2, "pp": 4}, {"tp": 4, "cp": 2, "ep": 2, "etp": 2, "pp": 2}, {"pp": 2, "cp": 2}],
)
def test_strategy_all_creates_each_distinct_group_once_in_one_global_order(
    monkeypatch: pytest.MonkeyPatch, layout: dict[str, Any]
) -> None:
    """Strategy all: every rank calls new_group for every distinct group, in kind order."""
    topo = Topology(32, **layout)
    with fake_world(32, 5), recording(monkeypatch) as calls:
        groups = ProcessGroups.create(topo, strategy="all")
        assert [ranks for ranks, _ in calls] == _distinct_in_order(topo)
        assert not any(local for _, local in calls)
        assert groups.calls == len(calls)
        groups.destroy()


def test_strategy_local_calls_once_per_distinct_group_of_the_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Strategy local: a rank calls new_group (locally synchronised) once per its own groups."""
    topo = Topology(64, tp=2, cp=2, pp=4)
    for rank in (0, 5, 63):
        with fake_world(64, rank), recording(monkeypatch) as calls:
            groups = ProcessGroups.create(topo, strategy="local")
            mine = {topo.group_of(rank, k) for k in topo.kinds if topo.has_group(rank, k)}
            assert sorted(r for r, _ in calls) == sorted(g for g in mine if len(g) > 1)
            assert all(local for _, local in calls)
            groups.destroy()


def test_per_kind_timeout_makes_a_separate_communicator(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind with its own timeout does not share the communicator of an equal rank set."""
    topo = Topology(8, pp=2, tp=4)  # the embedding group of stage 0/1 equals the pp group
    with fake_world(8, 0), recording(monkeypatch) as calls:
        groups = ProcessGroups.create(topo, strategy="local", timeout={"pp": timedelta(seconds=99)})
        assert groups.group("pp") is not groups.group("embedding")
        assert [r for r, _ in calls].count((0, 4)) == 2
        groups.destroy()


def test_invalid_arguments_raise_topology_errors() -> None:
    """Bad strategy, kinds, backends or timeout and a split without NCCL are refused clearly."""
    topo = Topology(8, tp=2)
    with pytest.raises(TopologyError, match=r"torch\.distributed is not initialized"):
        ProcessGroups.create(topo)
    with fake_world(8, 0):
        with pytest.raises(TopologyError, match=r"strategy 'fast' is not known; use one of"):
            ProcessGroups.create(topo, strategy="fast")
        with pytest.raises(TopologyError, match=r"strategy 'split' needs an NCCL default group"):
            ProcessGroups.create(topo, strategy="split")
        with pytest.raises(TopologyError, match=r"kinds names unknown kind 'xp'; valid kinds"):
            ProcessGroups.create(topo, kinds=("tp", "xp"))
        with pytest.raises(TopologyError, match=r"kinds must be a sequence of kinds"):
            ProcessGroups.create(topo, kinds="tp")
        with pytest.raises(TopologyError, match=r"timeout must be a positive datetime.timedelta"):
            ProcessGroups.create(topo, timeout=30)  # type: ignore[arg-type]
        with pytest.raises(TopologyError, match=r"do not fit the default group of 8 ranks"):
            ProcessGroups.create(Topology(16, tp=2))
        groups = ProcessGroups.create(topo, kinds=("tp",), gloo=())
        with pytest.raises(TopologyError, match=r"kind 'pp' was not created; pass kinds="):
            groups.group("pp")
        with pytest.raises(TopologyError, match=r"kind 'tp' has no gloo companion"):
            groups.gloo_group("tp")
        groups.destroy()
