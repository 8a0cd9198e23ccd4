"""The NVLS and memory budgets of the pre-launch check count what ``ProcessGroups.create`` makes.

The oracle is the adapter's own plan (``topology_torch._creation_plan.global_plan``, no process
group needed): every communicator it creates, keyed as it keys them (ranks, copy, ``separate``,
``pg_options`` by identity). Per NVLink domain the communicators with two or more ranks there
must be :func:`~topology._preflight.budget.nvls_groups`'s count, with any ``separate``,
``independent`` and ``pg_options``. As in ``test_communicator_sharing``, the default group is one
rank larger than the layout, so the adapter never reuses it for a group.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Topology
from topology._preflight.budget import nvls_groups
from topology._preflight.communicators import communicators
from topology.strategies import topologies
from topology_torch._creation_plan import Settings, global_plan

OPTIONS = (object(), object())
"""Two torch-like options objects: kinds given the same one may share, different ones not."""


def _plan(topo: Topology, data: st.DataObject) -> dict[str, object]:
    kinds = st.lists(st.sampled_from(topo.kinds), max_size=3, unique=True)
    chosen = data.draw(st.dictionaries(st.sampled_from(topo.kinds), st.sampled_from(OPTIONS)))
    return {
        "separate": tuple(data.draw(kinds, label="separate")),
        "independent": tuple(data.draw(kinds, label="independent")),
        "pg_options": chosen or None,
    }


def _per_domain(topo: Topology, plan: dict[str, object], size: int) -> Counter[int]:
    """The adapter's communicators with two or more ranks in each domain of ``size`` ranks."""
    world = topo.rank_offset + topo.world_size + 1
    made = Settings.build(topo, world_size=world, default_backend="nccl", gloo=None, **plan)  # type: ignore[arg-type]
    found: Counter[int] = Counter()
    for _, ranks in global_plan(made):
        domains = Counter(r // size for r in ranks)
        found.update(d for d, n in domains.items() if n > 1)
    return found


@settings(max_examples=60, deadline=None)
@given(topologies(max_world_size=32), st.sampled_from([2, 4, 8]), st.data())
def test_nvls_count_is_the_adapters_per_domain(
    topo: Topology, size: int, data: st.DataObject
) -> None:
    """Busiest domain of the plan == nvls_groups, with separate/independent/pg_options."""
    plan = _plan(topo, data)
    expected = _per_domain(topo, plan, size)
    end = topo.rank_offset + topo.world_size
    most, domain, exact = nvls_groups(topo, [r // size for r in range(end)], **plan)
    assert exact and most == max(expected.values(), default=0)
    if most:
        assert domain == min(d for d, n in expected.items() if n == most)


@settings(max_examples=60, deadline=None)
@given(topologies(max_world_size=32), st.data())
def test_communicator_total_is_the_adapters_with_pg_options(
    topo: Topology, data: st.DataObject
) -> None:
    """Strategy 'all' counts every communicator the plan makes, pg_options included."""
    plan = _plan(topo, data)
    world = topo.rank_offset + topo.world_size + 1
    made = Settings.build(topo, world_size=world, default_backend="nccl", gloo=None, **plan)  # type: ignore[arg-type]
    assert communicators(topo, **plan).all == sum(1 for _ in global_plan(made))  # type: ignore[arg-type]
