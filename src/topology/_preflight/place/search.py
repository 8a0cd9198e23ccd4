"""Local search for :func:`~.place.place`: swap hosts while the crossing vector drops (private).

The packing in :mod:`.place` is optimal when component sizes divide each other; a layout whose
group sizes do not divide the hosts' GPU count (tp 12 on 8-GPU hosts) can leave a better order
unfound. This pass tries swaps of two slots' hosts (spare hosts count as slots without groups)
and keeps a swap when the lexicographic vector of :meth:`Crossings.key` gets smaller, until no
swap helps or a budget of lookups is spent, so its time is bounded on any allocation.

Algorithm: each group's host set is stored once per distinct kind with a weight per kind class
(how many groups of the class share it); a swap only changes the sets that hold one of its two
slots, so its effect is the sum over those sets of the change in "crosses tier t" per class.

>>> improve([0, 1, 2, 3], [[0, 1, 0, 1]], [((0, 1), (1,)), ((2, 3), (1,))], budget=1000)
[3, 1, 2, 0]
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["SEARCH_BUDGET", "improve"]

SEARCH_BUDGET = 1_000_000
"""Pairs tried plus slot lookups the search may spend (a few tenths of a second)."""

WeightedSet = tuple[tuple[int, ...], tuple[int, ...]]
"""A host set's slots and, per kind class, how many groups of that class it stands for."""


def improve(
    order: Sequence[int],
    labels: Sequence[Sequence[int]],
    sets: Sequence[WeightedSet],
    *,
    budget: int = SEARCH_BUDGET,
) -> list[int]:
    """``order`` (slot -> host, then the spare hosts) after first-improvement swaps.

    ``labels[t][host]`` is the domain of ``host`` at tier ``t``; ``sets`` are the groups' slots
    with their weights per class. Only the first ``max(slot) + 1`` positions run ranks.
    """
    hosts = list(order)
    tiers = len(labels)
    if not tiers or not sets:
        return hosts
    classes = len(sets[0][1])
    holding: list[list[int]] = [[] for _ in hosts]
    for index, (slots, _) in enumerate(sets):
        for slot in slots:
            holding[slot].append(index)

    def crossed(index: int) -> list[bool]:
        slots = sets[index][0]
        return [len({row[hosts[s]] for s in slots}) > 1 for row in labels]

    state = [crossed(i) for i in range(len(sets))]
    spent = 0
    improved = True
    while improved and spent < budget:
        improved = False
        for i in range(len(hosts)):
            if not any(any(state[index]) for index in holding[i]):
                continue
            for j in range(len(hosts)):
                spent += 1
                if j == i or all(row[hosts[i]] == row[hosts[j]] for row in labels):
                    continue
                touched = sorted(set(holding[i]) | set(holding[j]))
                spent += sum(len(sets[index][0]) for index in touched) * tiers
                hosts[i], hosts[j] = hosts[j], hosts[i]
                after = {index: crossed(index) for index in touched}
                delta = [0] * (classes * tiers)
                for index in touched:
                    weights = sets[index][1]
                    for t in range(tiers):
                        change = after[index][t] - state[index][t]
                        if change:
                            for c in range(classes):
                                delta[c * tiers + t] += change * weights[c]
                first = next((d for d in delta if d), 0)
                if first < 0:
                    for index, value in after.items():
                        state[index] = value
                    improved = True
                else:
                    hosts[i], hosts[j] = hosts[j], hosts[i]
                if spent >= budget:
                    return hosts
    return hosts
