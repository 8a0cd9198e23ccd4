"""A tier whose domains split the hosts as an earlier tier does (a chain of switches over the
same leaves, a ``topology.conf`` of hundreds of levels) changes nothing ``place`` decides: the
same hosts, method and proof, its crossings and bound those of the tier it repeats.

``place`` places such an allocation on its distinct tiers only (a 401-tier chain would
otherwise cost every tier in every packing and bound); the law compares an allocation with its
copy that repeats some tiers, on generated layouts and rack/leaf shapes (racks in runs or
scattered), and a golden pins the deep chain of ``benchmarks/bench_allocation_shapes.py``.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Allocation, Host, RankMap, Tier, Topology, place
from topology.strategies import topologies


def _repeat(row: tuple, copies: list[int]) -> tuple:
    """``row`` (one entry per tier) with entry ``t`` repeated ``copies[t]`` more times."""
    return tuple(v for v, n in zip(row, copies, strict=True) for _ in range(n + 1))


@settings(max_examples=20, deadline=None)
@given(topologies(max_world_size=32, max_rank_offset=0), st.data())
def test_repeated_tiers_change_no_decision(topo: Topology, data: st.DataObject) -> None:
    gpus = data.draw(st.sampled_from([1, 2, 4]), label="gpus")
    hosts = -(-topo.world_size // gpus) + data.draw(st.integers(0, 2), label="spare")
    rack = data.draw(st.integers(1, 4), label="rack")
    leaf = rack * data.draw(st.integers(1, 3), label="leaf")
    scattered = data.draw(st.booleans(), label="scattered")
    domains = [
        (f"r{i % rack if scattered else i // rack}", f"l{i // leaf}", "spine") for i in range(hosts)
    ]
    tiers = [Tier("rack", nvlink=True), Tier("leaf"), Tier("spine")]
    copies = data.draw(st.lists(st.integers(0, 2), min_size=3, max_size=3), label="copies")
    plain = Allocation([Host(f"n{i}", gpus, d) for i, d in enumerate(domains)], tiers)
    chained = Allocation(
        [Host(f"n{i}", gpus, _repeat(d, copies)) for i, d in enumerate(domains)],
        [
            Tier(f"{t.name}{k}", nvlink=t.nvlink)
            for t, n in zip(tiers, copies, strict=True)
            for k in range(n + 1)
        ],
    )
    one, two = place(topo, plain), place(topo, chained)
    assert (two.hosts, two.method, two.exact) == (one.hosts, one.method, one.exact)
    width = len(tiers)

    def wide(key: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(
            v
            for c in range(len(key) // width)
            for v in _repeat(key[c * width : (c + 1) * width], copies)
        )

    assert two.after.key() == wide(one.after.key())
    assert two.before.key() == wide(one.before.key())
    assert two.bound == (None if one.bound is None else wide(one.bound))
    assert two.proven == wide(one.proven) and two.optimal == one.optimal
    for kind in topo.kinds:
        if kind in one.after.kinds:
            assert two.after.count(kind, "node") == one.after.count(kind, "node")


def test_a_401_tier_switch_chain_places_as_its_leaves() -> None:
    """The deep chain of the allocation-shapes benchmark: 1,024 hosts of 8 GPUs under 32 leaves
    of 32 hosts, then 400 core switches each over the one below (each core tier one domain of
    all hosts). It places exactly as the leaves alone do, and no group crosses a core tier
    (one domain cannot be crossed)."""
    leaves = [Host(f"n{i}", 8, (f"l{i // 32}",)) for i in range(1024)]
    hosts = [Host(h.name, 8, (*h.domains, *("core",) * 400)) for h in leaves]
    tiers = [Tier("leaf"), *(Tier(f"c{k}") for k in range(400))]
    topo = Topology(8192, tp=8, pp=8)
    found = place(topo, Allocation(hosts, tiers))
    alone = place(topo, Allocation(leaves, [Tier("leaf")]))
    assert (found.hosts, found.method) == (alone.hosts, alone.method)
    assert found.after.count("pp", "leaf") == alone.after.count("pp", "leaf")
    assert {found.after.count(kind, f"c{k}") for kind in found.after.kinds for k in range(400)} == {
        0
    }


def test_a_chain_keeps_the_launcher_order_and_prices_the_whole_allocation() -> None:
    """With a launcher order and a step time: the chained allocation's arrangement counts its
    baseline in that order (lexicographic here, which crosses 18 dp/pp groups of racks of 5
    where the listed order crosses 20), and the step time sees every tier of the chained
    allocation, pricing as the plain one does."""
    plain_hosts = [Host(f"n{i}", 2, (f"r{i // 5}",)) for i in range(12)]
    plain = Allocation(plain_hosts, [Tier("rack", nvlink=True)])
    chained = Allocation(
        [Host(h.name, 2, (*h.domains, *h.domains)) for h in plain_hosts],
        [Tier("rack", nvlink=True), Tier("rack2")],
    )
    topo = Topology(24, tp=2, pp=2)
    seen: list[int] = []

    def step_time(rank_map: RankMap) -> float:
        seen.append(len(rank_map.tiers))
        return float(rank_map.host_order.index("n3"))

    one = place(topo, plain, order="lexicographic", step_time=step_time)
    plain_seen, seen[:] = set(seen), []
    two = place(topo, chained, order="lexicographic", step_time=step_time)
    assert plain_seen == {1} and set(seen) == {2}
    assert one.before.key() == (0, 0, 18) and two.before.key() == (0, 0, 0, 0, 18, 18)
    assert (two.hosts, two.step_time_before, two.step_time_after) == (
        one.hosts,
        one.step_time_before,
        one.step_time_after,
    )
    assert one.step_time_before is not None and two.bound is not None
    listed = place(topo, chained, step_time=step_time)
    assert listed.before.key() == (0, 0, 0, 0, 20, 20)
