"""The peer bounds of a transfer plan are sound: no plan has fewer peers per rank.

Law: every plan (balanced, and the peers' source choices of ``tests/transfer_peers.py``) has at
least the bounds' peers; brute force: on small demand families, and on small layouts, the fewest
peers any plan can have (every way to pick one holder per piece and receiver) is at least the bound.
One holder per (piece, receiver) suffices for the brute force: any plan contains such a choice,
and dropping links never adds a peer.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_transfer_laws import Case, cases
from tests.transfer_peers import PeerPlanner
from topology import Topology
from topology._transfer.bounds import peer_bounds
from topology._transfer.params import Param
from topology._transfer.plan import transfer
from topology._transfer.planner import Planner
from topology.strategies import topologies

Demand = tuple[tuple[int, ...], tuple[int, ...]]
LIMIT = 4096
"""The most assignments a brute force enumerates."""


def _fewest_peers(demands: Sequence[Demand]) -> tuple[int, int]:
    """The fewest (most send peers, most receive peers) over every one-holder assignment,
    each minimised on its own."""
    slots = [(holders, r) for holders, need in demands for r in need]
    best_send, best_recv = math.inf, math.inf
    for choice in itertools.product(*(holders for holders, _ in slots)):
        sends: dict[int, set[int]] = defaultdict(set)
        recvs: dict[int, set[int]] = defaultdict(set)
        for s, (_, r) in zip(choice, slots, strict=True):
            sends[s].add(r)
            recvs[r].add(s)
        best_send = min(best_send, max(map(len, sends.values()), default=0))
        best_recv = min(best_recv, max(map(len, recvs.values()), default=0))
    return int(best_send), int(best_recv)


def _assignments(demands: Sequence[Demand]) -> int:
    return math.prod(len(holders) ** len(need) for holders, need in demands)


@st.composite
def demand_families(draw: st.DrawFn) -> list[Demand]:
    """One to four (holders, need) pairs over eight ranks, small enough to enumerate."""
    found: list[Demand] = []
    for _ in range(draw(st.integers(1, 4))):
        holders = draw(st.sets(st.integers(0, 7), min_size=1, max_size=3))
        others = sorted(set(range(8)) - holders)
        need = draw(st.sets(st.sampled_from(others), min_size=1, max_size=3))
        demand = (tuple(sorted(holders)), tuple(sorted(need)))
        if _assignments([*found, demand]) <= LIMIT:
            found.append(demand)
    return found


@settings(max_examples=150, deadline=None)
@given(demand_families())
def test_no_assignment_beats_the_peer_bounds(demands: list[Demand]) -> None:
    """On small demand families the fewest peers any plan can have is at least the bounds."""
    send_bound, recv_bound = peer_bounds(demands)
    fewest_send, fewest_recv = _fewest_peers(demands)
    assert send_bound <= fewest_send
    assert recv_bound <= fewest_recv


def test_the_peer_bounds_are_tight_on_disjoint_holders() -> None:
    """Two disjoint holder sets needed by three receivers: 2 senders each, 2 receivers each."""
    demands = [((0, 1), (4, 5, 6)), ((2, 3), (4, 5, 6))]
    assert peer_bounds(demands) == (2, 2) == _fewest_peers(demands)
    assert peer_bounds([]) == (0, 0)


def _demands(planner: Planner) -> list[Demand]:
    return [(planner.holder_list[h], need) for h, need in planner.pair_list]


@settings(max_examples=40, deadline=None)
@given(cases())
def test_no_plan_has_fewer_peers_than_the_bounds(case: Case) -> None:
    """The balanced plan and the peers' source choices all have at least the bounds' peers."""
    src, dst, params, layers, rank_map = case
    stats = transfer(src, dst, params, num_layers=layers, allocation=rank_map).stats
    found = [stats]
    for policy in ("first", "megatron") if src.gtp == src.egtp == 1 else ("first",):
        planner = PeerPlanner(src, dst, rank_map, policy)
        for index, param in enumerate(params):
            planner.weight(index, param, layers)
        found.append(planner.stats())
    for s in found:
        assert s["max_send_peers"] >= s["max_send_peers_bound"] == stats["max_send_peers_bound"]
        assert s["max_recv_peers"] >= s["max_recv_peers_bound"] == stats["max_recv_peers_bound"]
        assert (s["max_send_peers_bound"] > 0) == (s["bytes_total"] > 0)


SMALL = topologies(max_world_size=4, max_size=4, max_vpp=2, max_hcp_levels=0)


@settings(max_examples=40, deadline=None)
@given(SMALL, SMALL, st.sampled_from((True, True, False)))
def test_no_plan_of_a_small_layout_beats_the_peer_bounds(
    src: Topology, dst: Topology, apart: bool
) -> None:
    """On layouts of up to four ranks a side, brute force finds no plan below the bounds."""
    if apart:
        dst = Topology.from_dict({**dst.to_dict(), "rank_offset": src.world_size})
    unit = math.lcm(src.tp, dst.tp)
    params = [
        Param("qkv", (unit * 3, 2), sharding="column", parts=(unit * 2, unit), layer=0),
        Param("proj", (2, unit), sharding="row", layer=1),
        Param("norm", (3,), layer=1),
    ]
    layers = max(2, src.pp * (src.vpp or 1), dst.pp * (dst.vpp or 1))
    planner = Planner(src, dst, None)
    for index, param in enumerate(params):
        planner.weight(index, param, layers)
    demands = _demands(planner)
    stats = planner.stats()
    assert (stats["max_send_peers_bound"], stats["max_recv_peers_bound"]) == peer_bounds(demands)
    if _assignments(demands) <= LIMIT:
        fewest_send, fewest_recv = _fewest_peers(demands)
        assert stats["max_send_peers_bound"] <= fewest_send <= stats["max_send_peers"]
        assert stats["max_recv_peers_bound"] <= fewest_recv <= stats["max_recv_peers"]
