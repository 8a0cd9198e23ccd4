"""Lower bounds no transfer plan can beat: bytes and peers per rank (private).

A plan must give every receiver each piece it lacks, from some holder of that piece. Its
*demands* are the pairs ``(holders, need)``: a holder set and the receivers that lack a piece it
holds.

Bytes (``max_send_bound``): the bytes whose holders all lie in a set ``U`` of ranks are sent by
ranks of ``U``, so some rank of ``U`` sends at least ``ceil(bytes(U) / |U|)``; ``U`` runs over each
holder set, each source stage (all its ranks) and the whole source layout.
``max_recv_bound`` is the most bytes any receiver lacks, which it must receive.

Peers (``max_recv_peers_bound``, ``max_send_peers_bound``): a receiver needing pieces from ``k``
pairwise disjoint holder sets draws from ``k`` distinct senders at least (one in each), so the
largest such ``k`` bounds its peers; the sets are packed greedily, smallest first (any disjoint
family is a sound bound; the layouts' holder sets nest or are disjoint, where the greedy family
is the largest). A set ``U`` of senders must make at least ``X(U)`` distinct (sender, receiver)
links, ``X(U)`` the sum over receivers of their packings among the holder sets inside ``U``, so
one of them has ``ceil(X(U) / |U|)`` peers at least; ``U`` runs over each holder set (``X`` is then
the receivers needing it) and the union of all.

>>> peer_bounds([((0,), (4, 5, 6)), ((1, 2), (4,))])  # rank 0 alone serves three
(3, 2)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from .._megatron.topology import Topology

__all__ = ["peer_bounds", "send_bound"]

Demand = tuple[tuple[int, ...], Sequence[int]]
"""(holders, need): a holder set and the receivers that lack a piece it holds."""


def send_bound(src: Topology, total: int, needed: Iterable[tuple[tuple[int, ...], int]]) -> int:
    """The largest ``ceil(bytes(U) / |U|)`` over holder sets, source stages and the whole.

    Args:
        src: the source layout.
        total: the bytes the plan moves.
        needed: ``(holders, bytes)``: the bytes to send that only ``holders`` hold.
    """
    per_stage: dict[int, int] = defaultdict(int)
    bound = -(-total // src.world_size)
    for holders, nbytes in needed:
        bound = max(bound, -(-nbytes // len(holders)))
        stages = {src.stage(r) for r in (holders[0], holders[-1])}
        if len(stages) == 1:
            per_stage[stages.pop()] += nbytes
    stage_size = src.world_size // src.pp
    for nbytes in per_stage.values():
        bound = max(bound, -(-nbytes // stage_size))
    return bound


def _packing(sets: Iterable[frozenset[int]]) -> int:
    """How many pairwise disjoint sets a greedy pass (smallest first) finds."""
    taken: set[int] = set()
    count = 0
    for found in sorted(sets, key=len):
        if taken.isdisjoint(found):
            taken |= found
            count += 1
    return count


def peer_bounds(demands: Iterable[Demand]) -> tuple[int, int]:
    """``(max_send_peers_bound, max_recv_peers_bound)`` of any plan meeting ``demands``.

    Args:
        demands: ``(holders, need)`` pairs (see the module).
    """
    needs: dict[tuple[int, ...], set[int]] = defaultdict(set)
    for holders, need in demands:
        needs[holders].update(need)
    if not needs:
        return 0, 0
    sets = [frozenset(holders) for holders in needs]
    per_receiver: dict[int, list[int]] = defaultdict(list)
    for h, receivers in enumerate(needs.values()):
        for r in receivers:
            per_receiver[r].append(h)
    memo: dict[tuple[int, ...], int] = {}
    packed = []
    for family in per_receiver.values():
        key = tuple(family)
        if key not in memo:
            memo[key] = _packing(sets[h] for h in family)
        packed.append(memo[key])
    send = max(-(-len(receivers) // len(holders)) for holders, receivers in needs.items())
    senders = frozenset().union(*sets)
    send = max(send, -(-sum(packed) // len(senders)))
    return send, max(packed)
