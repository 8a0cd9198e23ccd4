"""The relay step of a transfer plan: who receives a piece over the network for its NVLink
domain, and who copies it on from there (private).

A piece needed by several receivers of one NVLink domain (a host, or the domain of the
allocation's innermost NVLink tier) that holds no copy of it would otherwise enter the domain's
NICs once per receiver; the lower bound (:mod:`topology._transfer.timing`) counts it once. With
the relay step the plan sends it over the network to one receiver of the domain, the *relay*
(stage 1), and the relay copies it over NVLink to the domain's other receivers (stage 2: a
:class:`~topology._transfer.planner.Pattern` of ``stage`` 2, whose senders send from their
destination shard what they received in stage 1).

Algorithm (which receiver relays): per piece and domain, the receiver that has relayed the
fewest bytes so far (its stage-2 sends), the first in the receivers' order on a tie; so the
NVLink fan-out of a domain is spread over its receivers within one piece of evenly, and the NIC
load, counted per domain, is the same whoever relays.

>>> relay = Relay([0, 0, 1, 1, 1])  # ranks 0-1 on one host, 2-4 on another
>>> relay.route(0, (0,), (2, 3, 4), 10)
((2,), [(2, 3), (2, 4)])
>>> relay.route(0, (0,), (2, 3, 4), 10)  # rank 2 has relayed 20 bytes: rank 3 relays
((3,), [(3, 2), (3, 4)])
>>> relay.route(1, (2,), (3, 4), 10)  # a holder in the domain: no relay
((3, 4), [])
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

__all__ = ["Relay"]


class Relay:
    """Who relays each piece, and how many bytes each receiver has relayed so far."""

    def __init__(self, domain: Sequence[int]) -> None:
        self.domain = domain
        """Each rank's NVLink domain label."""
        self.groups: dict[int, list[tuple[int, ...]]] = {}
        """Per (holders, receivers) pair id: the receivers of each domain that is relayed."""
        self.relayed: dict[int, int] = defaultdict(int)
        """The bytes each receiver has copied on (its stage-2 sends)."""

    def _groups(self, holders: Sequence[int], need: Sequence[int]) -> list[tuple[int, ...]]:
        """The receivers of each domain holding no copy that has two receivers or more."""
        domain = self.domain
        near = {domain[h] for h in holders}
        found: dict[int, list[int]] = defaultdict(list)
        for r in need:
            if domain[r] not in near:
                found[domain[r]].append(r)
        return [tuple(group) for group in found.values() if len(group) > 1]

    def route(
        self, pair: int, holders: Sequence[int], need: Sequence[int], nbytes: int
    ) -> tuple[tuple[int, ...], list[tuple[int, int]]]:
        """The receivers of one piece of ``nbytes`` (of the pair ``pair``: ``holders`` and
        the receivers ``need``) served over the network, in ``need``'s order, and the relay
        copies ``(relay, receiver)``, domain by domain."""
        groups = self.groups.get(pair)
        if groups is None:
            groups = self.groups[pair] = self._groups(holders, need)
        if not groups:
            return tuple(need), []
        relayed = self.relayed
        copies = []
        served: set[int] = set()
        for group in groups:
            relay = min(group, key=lambda r: relayed[r])
            relayed[relay] += nbytes * (len(group) - 1)
            copies += [(relay, r) for r in group if r != relay]
            served.update(r for r in group if r != relay)
        return tuple(r for r in need if r not in served), copies
