"""The adapter creates exactly the communicators the core's pre-launch check counts.

"Which kinds share a communicator" is decided by the core (``topology._preflight.communicators``:
``Communicators.shared``, ``all``, ``local`` and ``rank_communicators``) and planned by the adapter
(``topology_torch._creation_plan``: ``kind_plan``, ``global_plan``, ``local_plan``). These laws
tie the two together on the plan functions, which need no process group. The default group is
one rank larger than the layout, so no group is the whole default group (the adapter would reuse
the default group there, which the core counts as a communicator).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Topology
from topology._preflight.communicators import communicators, rank_communicators
from topology.strategies import topologies
from topology_torch._creation_plan import Channel, Settings, global_plan, kind_plan, local_plan

EXAMPLES = [
    Topology(8, tp=2, pp=2),
    Topology(16, tp=2, cp=2, pp=2),
    Topology(16, tp=2, ep=2, etp=1, pp=2),
    Topology(16, tp=2, cp=4, hcp_sizes=(2, 2)),
    Topology(16, tp=2, dist_opt_instances=2),
    Topology(32, tp=2, ep=4, pp=2, dist_opt_instances=2),
    Topology(16, cp=4, dist_opt_instances=8),
    Topology.ezpz(16, tp=2, pp=2, cp=2),
    Topology.ml_starter(8, 2, 2),
    Topology(8, tp=2, pp=4, rank_offset=3),
]

layouts = st.one_of(st.sampled_from(EXAMPLES), topologies(max_world_size=64))


def _settings(topo: Topology) -> Settings:
    world = topo.rank_offset + topo.world_size + 1
    return Settings.build(topo, world_size=world, default_backend="gloo", gloo=None)


def _ranks(topo: Topology) -> range:
    return range(topo.rank_offset, topo.rank_offset + topo.world_size)


@settings(max_examples=60, deadline=None)
@given(layouts)
def test_kinds_the_adapter_reuses_are_the_kinds_the_core_calls_shared(topo: Topology) -> None:
    """kind_plan's twins (one split per kind) are Communicators.shared, kind for kind."""
    twins = {
        channel.kind: twin.kind
        for channel, twin in kind_plan(_settings(topo))
        if isinstance(twin, Channel)
    }
    assert twins == dict(communicators(topo).shared)


@settings(max_examples=60, deadline=None)
@given(layouts)
def test_strategy_all_creates_the_core_count(topo: Topology) -> None:
    """global_plan (strategy "all") creates Communicators.all distinct groups."""
    assert len(list(global_plan(_settings(topo)))) == communicators(topo).all


@settings(max_examples=40, deadline=None)
@given(layouts)
def test_each_rank_creates_the_core_communicators(topo: Topology) -> None:
    """local_plan's new groups on a rank are rank_communicators, kind for kind, and the busiest
    rank makes Communicators.local of them."""
    plan = _settings(topo)
    counts = []
    for rank in _ranks(topo):
        new = tuple(c.kind for c, _, action in local_plan(plan, rank) if action == "new")
        assert new == rank_communicators(topo, rank)
        counts.append(len(new))
    core = communicators(topo)
    assert (min(counts), max(counts)) == (core.per_rank_min, core.local)


@st.composite
def layouts_with_own_kinds(draw: st.DrawFn) -> tuple[Topology, tuple[str, ...], tuple[str, ...]]:
    topo = draw(layouts)
    separate = tuple(draw(st.lists(st.sampled_from(topo.kinds), max_size=3, unique=True)))
    independent = tuple(draw(st.lists(st.sampled_from(topo.kinds), max_size=3, unique=True)))
    return topo, separate, independent


@settings(max_examples=60, deadline=None)
@given(layouts_with_own_kinds())
def test_separate_and_independent_kinds_are_counted_as_created(
    case: tuple[Topology, tuple[str, ...], tuple[str, ...]],
) -> None:
    """With separate= and independent=, strategy "all" creates Communicators.all groups and
    each rank the per-rank count the core reports."""
    topo, separate, independent = case
    world = topo.rank_offset + topo.world_size + 1
    plan = Settings.build(
        topo,
        world_size=world,
        default_backend="gloo",
        gloo=None,
        separate=separate,
        independent=independent,
    )
    core = communicators(topo, separate=separate, independent=independent)
    assert len(list(global_plan(plan))) == core.all
    counts = [
        sum(action == "new" for _, _, action in local_plan(plan, rank)) for rank in _ranks(topo)
    ]
    assert (min(counts), max(counts)) == (core.per_rank_min, core.per_rank_max)


def test_a_separate_kind_gets_its_own_communicators() -> None:
    """dp and dp-cp are one rank set when cp = 1: shared by default, two with separate=("dp",)."""
    topo = Topology(16, tp=2, pp=2)
    assert ("dp", "dp-cp") in communicators(topo).shared
    assert communicators(topo, separate=("dp",)).all == communicators(topo).all + 4
    assert communicators(topo, separate=("dp",)).per_rank_max == (
        communicators(topo).per_rank_max + 1
    )
