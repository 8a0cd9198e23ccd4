"""What a layout's communicators cost before launch: GPU memory per rank and NVLS multicast
groups per NVLink domain (private).

- Memory: every distinct communicator a rank joins holds its own NCCL buffers. NVIDIA/nccl#964
  measured 544 MB for a 2-rank and 688 MB for a larger communicator on A100 NVLink (channels and
  algorithms change it, NVIDIA/nccl#986); :data:`NCCL_MEMORY` is the larger figure, and callers
  may give their own.
- NVLS: on NVSwitch systems every communicator that uses NVLink SHARP takes a multicast object
  on the switch of each NVLink domain it has two or more ranks in; an NVSwitch has
  :data:`NVLS_LIMIT` of them (NVIDIA/nccl#2077, pytorch/pytorch#187155), and duplicates of one
  rank set each take their own. We count, per NVLink domain, the distinct communicators (kinds
  with equal groups count once) with two or more ranks in it: an upper bound on what NCCL
  allocates, since it may choose another algorithm.

>>> from topology import Topology
>>> most, domain, exact = nvls_groups(Topology(16, tp=2, pp=2), [r // 8 for r in range(16)])
>>> most, domain, exact
(11, 0, True)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from .._megatron.topology import Topology
from .crossings import distinct_kinds
from .placement import shape_of

__all__ = ["DOMAIN_SAMPLE", "NCCL_MEMORY", "NVLS_LIMIT", "nvls_groups", "nvls_groups_sampled"]

NCCL_MEMORY = 688e6
"""Bytes of GPU memory one NCCL communicator holds (NVIDIA/nccl#964, A100, more than 2 ranks)."""

NVLS_LIMIT = 128
"""NVLink SHARP multicast groups one NVSwitch domain can hold (NVIDIA/nccl#2077)."""

DOMAIN_SAMPLE = 1 << 12
"""A sampled domain is measured on at most this many of its ranks."""


def _identity(topo: Topology, kind: str, index: int, by_ranks: bool) -> object:
    """What makes a group one communicator: its ranks where an irregular kind may repeat another
    kind's group (and the group is small enough to list), else its kind and index."""
    if by_ranks and topo.size(kind) <= DOMAIN_SAMPLE:
        return tuple(topo.groups(kind)[index])
    return (kind, index)


def _communicator_kinds(topo: Topology) -> list[str]:
    """One kind per distinct rank-set family, skipping kinds whose groups are single ranks."""
    first = distinct_kinds(topo, topo.kinds)
    return [k for k in topo.kinds if first[k] == k and topo.size(k) > 1]


def nvls_groups(topo: Topology, domain_of: Sequence[int]) -> tuple[int, int, bool]:
    """The most communicators with two or more ranks in one NVLink domain, that domain's label,
    and True (exact): every group of every kind is measured, and equal rank sets (an
    ``intra-dp-cp`` chunk that is also a cp group) are one communicator, as the adapter makes them.

    ``domain_of[r]`` labels the NVLink domain of global rank ``r`` (``rank_offset`` included).
    """
    per_domain: dict[int, set[tuple[int, ...]]] = {}
    for kind in _communicator_kinds(topo):
        for group in topo.groups(kind):
            counts = Counter(domain_of[r] for r in group)
            for domain, n in counts.items():
                if n > 1:
                    per_domain.setdefault(domain, set()).add(tuple(group))
    if not per_domain:
        return 0, domain_of[topo.rank_offset], True
    domain, most = min(((d, len(g)) for d, g in per_domain.items()), key=lambda i: (-i[1], i[0]))
    return most, domain, True


def nvls_groups_sampled(
    topo: Topology, domain_size: int, domains: Sequence[int]
) -> tuple[int, int, bool]:
    """:func:`nvls_groups` on consecutive domains of ``domain_size`` ranks, measured only on
    ``domains`` (their indices; for a world too large to walk) and, in a domain of more than
    :data:`DOMAIN_SAMPLE` ranks, only on its first ones (then a lower bound); exact is False.

    Each rank's group is found by the kind table's lookup (:meth:`Topology.group_index`), so
    the time is the ranks measured times the kinds, whatever the world size.
    """
    best = (-1, 0)
    end = topo.rank_offset + topo.world_size
    kinds = _communicator_kinds(topo)
    by_ranks = any(shape_of(topo, kind) is None for kind in kinds)
    for domain in domains:
        start = max(domain * domain_size, topo.rank_offset)
        stop = min((domain + 1) * domain_size, end, start + DOMAIN_SAMPLE)
        found: set[object] = set()
        for kind in kinds:
            members: Counter[int] = Counter(
                topo.group_index(rank, kind)
                for rank in range(start, stop)
                if topo.has_group(rank, kind)
            )
            found.update(
                _identity(topo, kind, index, by_ranks) for index, n in members.items() if n > 1
            )
        seen = len(found)
        if seen > best[0]:
            best = (seen, domain)
    return max(best[0], 0), best[1], False
