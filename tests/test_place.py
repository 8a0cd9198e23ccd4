"""place() and crossings(): optimal against brute force, never worse than a launcher order.

The brute-force reference shares no code with ``place``: it tries every sequence of NVLink
domains the job's hosts could be given in (hosts of one domain are interchangeable), counts the
groups that cross straight from ``Topology.groups`` and keeps the lexicographic minimum of
(tp/etp crossings, ep/cp crossings).
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import (
    Allocation,
    Host,
    RankMap,
    Tier,
    Topology,
    TopologyError,
    crossings,
    place,
)
from topology._machine.hosts import LAUNCHER_ORDERS
from topology._preflight.place.bound import lower_bound
from topology.cost import H100_NODE, MODELS, estimate

FAST = ("tp", "etp")
MIDDLE = ("ep", "cp")


def _allocation(sizes: list[int], gpus: int, names: list[str] | None = None) -> Allocation:
    hosts = []
    number = 0
    for rack, size in enumerate(sizes):
        for _ in range(size):
            number += 1
            name = names[number - 1] if names else f"node{number}"
            hosts.append(Host(name, gpus, (f"rack{rack}",)))
    return Allocation(hosts, [Tier("rack", nvlink=True)])


def _crossing(topo: Topology, kinds: tuple[str, ...], label_of_rank: list[int]) -> int:
    total = 0
    for kind in kinds:
        for group in topo.groups(kind):
            if len({label_of_rank[r] for r in group}) > 1:
                total += 1
    return total


def _sequences(capacity: Counter[int], length: int) -> itertools.chain[tuple[int, ...]]:
    """Every distinct sequence of ``length`` domain labels that ``capacity`` allows."""

    def extend(prefix: tuple[int, ...]) -> list[tuple[int, ...]]:
        if len(prefix) == length:
            return [prefix]
        used = Counter(prefix)
        found = []
        for label in sorted(capacity):
            if used[label] < capacity[label]:
                found += extend((*prefix, label))
        return found

    return itertools.chain(extend(()))


def _brute_force(topo: Topology, sizes: list[int], gpus: int) -> tuple[int, int]:
    slots = -(-topo.world_size // gpus)
    capacity = Counter({rack: size for rack, size in enumerate(sizes)})
    best = None
    for labels in _sequences(capacity, slots):
        per_rank = [labels[r // gpus] for r in range(topo.world_size)]
        score = (_crossing(topo, FAST, per_rank), _crossing(topo, MIDDLE, per_rank))
        best = score if best is None or score < best else best
    assert best is not None
    return best


@st.composite
def small_cases(draw: st.DrawFn) -> tuple[Topology, list[int], int]:
    gpus = draw(st.sampled_from([1, 2, 4]))
    sizes = draw(st.lists(st.integers(1, 4), min_size=2, max_size=3))
    hosts = sum(sizes)
    slots = draw(st.integers(1, min(hosts, 7)))
    world = slots * gpus
    factors = [d for d in range(1, world + 1) if world % d == 0]
    tp = draw(st.sampled_from(factors))
    rest = world // tp
    cp = draw(st.sampled_from([d for d in factors if rest % d == 0]))
    rest //= cp
    pp = draw(st.sampled_from([d for d in factors if rest % d == 0]))
    rest //= pp
    ep = draw(st.sampled_from([d for d in factors if (rest * cp) % d == 0]))
    order = draw(st.sampled_from(["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "tp-pp-dp", "tp-dp-pp"]))
    try:
        topo = Topology(world, tp=tp, cp=cp, pp=pp, ep=ep, order=order)
    except TopologyError:
        topo = Topology(world, tp=tp, cp=cp, pp=pp)
    return topo, sizes, gpus


@settings(max_examples=150, deadline=None)
@given(small_cases())
def test_place_reaches_the_brute_force_optimum(case: tuple[Topology, list[int], int]) -> None:
    topo, sizes, gpus = case
    found = place(topo, _allocation(sizes, gpus))
    fast = sum(found.after.count(k, "rack") for k in FAST)
    middle = sum(found.after.count(k, "rack") for k in MIDDLE)
    assert (fast, middle) == _brute_force(topo, sizes, gpus)


@settings(max_examples=100, deadline=None)
@given(small_cases(), st.sampled_from(LAUNCHER_ORDERS), st.randoms(use_true_random=False))
def test_place_is_never_worse_than_the_launcher(
    case: tuple[Topology, list[int], int], order: str, rng: object
) -> None:
    topo, sizes, gpus = case
    names = [f"n{i}" for i in range(1, sum(sizes) + 1)]
    rng.shuffle(names)  # type: ignore[attr-defined]
    alloc = _allocation(sizes, gpus, names)
    found = place(topo, alloc, order=order)
    launched = crossings(topo, alloc.rank_map(topo.world_size, order=order))
    assert found.before == launched
    assert found.after.key() <= launched.key()
    assert len(set(found.hosts)) == len(found.hosts) == -(-topo.world_size // gpus)
    assert set(found.hosts) | set(found.unused) == {h.name for h in alloc.hosts}
    # The score place reports is what crossings() measures on the map it hands out.
    assert crossings(topo, found.rank_map()) == found.after


@pytest.mark.parametrize(("ep", "crossing"), [(2, 0), (8, 4)])
def test_ragged_nvl72_keeps_ep_groups_in_racks_where_trays_allow(ep: int, crossing: int) -> None:
    """An ep group of ``ep`` ranks strides over the 4 ranks of a tray (etp = tp = 4), so the
    ``4 * ep`` ranks of one expert block fill ``ep`` trays and hold 4 ep groups. Racks of 18,
    18, 16 and 12 trays hold 9+9+8+6 = 32 whole blocks of 2 trays (all of them) but only
    2+2+2+1 = 7 of the 8 blocks of 8 trays: one block, 4 ep groups, must cross."""
    alloc = _allocation([18, 18, 16, 12], 4)
    topo = Topology(256, tp=4, ep=ep, pp=4)
    found = place(topo, alloc, order="lexicographic")
    assert found.after.count("ep", "rack") == crossing
    assert found.before.count("ep", "rack") > crossing
    assert found.improved


def test_an_order_that_is_already_best_is_kept() -> None:
    alloc = _allocation([4, 4], 2)
    found = place(Topology(16, tp=4), alloc)
    assert found.method == "listed"
    assert found.hosts == tuple(h.name for h in alloc.hosts)
    assert not found.improved


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda a: place(Topology(8, tp=2, rank_offset=8), a), "rank_offset"),
        (lambda a: place(Topology(64, tp=2), a), "more GPUs"),
        (lambda a: place(Topology(8, tp=2), a, order="sorted"), "order must be one of"),
        (lambda a: place("tp2", a), "must be a Topology"),
        (lambda a: place(Topology(8), [a]), "must be an Allocation"),
    ],
)
def test_place_refuses_bad_input(call: object, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        call(_allocation([2, 2], 2))  # type: ignore[operator]


def test_place_takes_mixed_gpu_counts() -> None:
    """Hosts of 4 and 8 GPUs (issue 31): the 8-GPU host runs the tp8 group whole."""
    alloc = Allocation([Host("a", 4), Host("b", 8)])
    found = place(Topology(12, tp=4), alloc)
    assert found.after.count("tp", "node") == 0
    found = place(Topology(8, tp=8), alloc)
    assert found.hosts == ("b",) and found.unused == ("a",) and found.improved


def test_crossings_refuse_a_map_too_small() -> None:
    alloc = _allocation([2], 2)
    with pytest.raises(TopologyError, match="needs rank_offset \\+ world_size = 8"):
        crossings(Topology(4, rank_offset=4), alloc.rank_map(4))


@settings(max_examples=150, deadline=None)
@given(small_cases())
def test_the_lower_bound_never_exceeds_the_brute_force_optimum(
    case: tuple[Topology, list[int], int],
) -> None:
    topo, sizes, gpus = case
    alloc = _allocation(sizes, gpus)
    fast, middle = _brute_force(topo, sizes, gpus)
    bound_fast = lower_bound(topo, alloc, "rack", FAST)
    bound_middle = lower_bound(topo, alloc, "rack", MIDDLE)
    assert bound_fast is None or bound_fast <= fast
    assert bound_middle is None or bound_middle <= middle


def test_a_job_that_fits_one_leaf_is_confined_to_it() -> None:
    """Leaf a has 5 free hosts, leaf b 8: an 8-host job on b crosses no leaf at all."""
    hosts = [Host(f"a{i}", 8, ("a", "s")) for i in range(5)]
    hosts += [Host(f"b{i}", 8, ("b", "s")) for i in range(8)]
    alloc = Allocation(hosts, [Tier("leaf"), Tier("spine")])
    topo = Topology(64, tp=8, pp=2)
    found = place(topo, alloc, order="natural")
    assert all(name.startswith("b") for name in found.hosts)
    assert all(found.after.count(kind, "leaf") == 0 for kind in found.after.kinds)
    assert found.before.count("dp", "leaf") > 0
    assert sorted(found.unused) == [f"a{i}" for i in range(5)]


def test_hosts_of_unknown_domain_go_last() -> None:
    """Two known racks of 2 hosts and two hosts of unknown rack; tp spans two hosts."""
    hosts = [Host("u1", 4, (None,)), Host("r1a", 4, ("r1",)), Host("u2", 4, (None,))]
    hosts += [Host("r1b", 4, ("r1",)), Host("r2a", 4, ("r2",)), Host("r2b", 4, ("r2",))]
    alloc = Allocation(hosts, [Tier("rack", nvlink=True)])
    found = place(Topology(16, tp=8), alloc)
    assert found.after.count("tp", "rack") == 0
    assert set(found.unused) == {"u1", "u2"}


def test_arrangement_serialises_hosts_and_crossings() -> None:
    alloc = _allocation([3, 3], 2)
    found = place(Topology(8, tp=4), alloc, order="lexicographic")
    data = found.to_dict()
    assert data["hosts"] == list(found.hosts)
    assert data["baseline"] == "lexicographic"
    assert data["crossings"]["tp"]["rack"] == {
        "before": found.before.count("tp", "rack"),
        "after": found.after.count("tp", "rack"),
    }
    assert data["tiers"] == ["node", "rack"]
    assert found.hostfile().splitlines() == list(found.hosts)


def test_step_time_breaks_ties_and_is_reported() -> None:
    alloc = Allocation([Host("b", 2), Host("a", 2)])

    def seconds(rank_map: RankMap) -> float:
        return 1.0 if rank_map.host_order[0] == "a" else 2.0

    found = place(Topology(4, tp=2), alloc, step_time=seconds)
    assert found.hosts == ("a", "b")
    assert (found.step_time_before, found.step_time_after) == (2.0, 1.0)
    assert found.to_dict()["step_time"] == {"before": 2.0, "after": 1.0}


def test_step_time_from_the_cost_model_never_grows() -> None:
    alloc = _allocation([18, 18, 16, 12], 4)
    topo = Topology(256, tp=4, ep=8, etp=1, pp=4)
    model = MODELS["mixtral-8x7b"]
    found = place(
        topo,
        alloc,
        order="lexicographic",
        step_time=lambda m: estimate(topo, m, model, H100_NODE).total,
    )
    assert found.step_time_before is not None and found.step_time_after is not None
    assert found.step_time_after <= found.step_time_before


@pytest.mark.parametrize("bad", [lambda m: -1.0, lambda m: float("nan"), lambda m: "1"])
def test_step_time_must_return_seconds(bad: object) -> None:
    with pytest.raises(TopologyError, match="step_time must return a finite number"):
        place(Topology(4, tp=2), Allocation([Host("a", 2), Host("b", 2)]), step_time=bad)  # type: ignore[arg-type]
