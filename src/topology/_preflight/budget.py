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

__all__ = ["DOMAIN_SAMPLE", "NCCL_MEMORY", "NVLS_LIMIT", "nvls_groups", "nvls_groups_sampled"]

NCCL_MEMORY = 688e6
"""Bytes of GPU memory one NCCL communicator holds (NVIDIA/nccl#964, A100, more than 2 ranks)."""

NVLS_LIMIT = 128
"""NVLink SHARP multicast groups one NVSwitch domain can hold (NVIDIA/nccl#2077)."""

DOMAIN_SAMPLE = 1 << 12
"""A sampled domain is measured on at most this many of its ranks."""


def _communicator_kinds(topo: Topology) -> list[str]:
    """One kind per distinct rank-set family, skipping kinds whose groups are single ranks."""
    first = distinct_kinds(topo, topo.kinds)
    return [k for k in topo.kinds if first[k] == k and topo.size(k) > 1]


def nvls_groups(topo: Topology, domain_of: Sequence[int]) -> tuple[int, int, bool]:
    """The most communicators with two or more ranks in one NVLink domain, that domain's label,
    and True (exact): every group of every kind is measured.

    ``domain_of[r]`` labels the NVLink domain of global rank ``r`` (``rank_offset`` included).
    """
    per_domain: Counter[int] = Counter()
    for kind in _communicator_kinds(topo):
        for group in topo.groups(kind):
            counts = Counter(domain_of[r] for r in group)
            per_domain.update(d for d, n in counts.items() if n > 1)
    if not per_domain:
        return 0, domain_of[topo.rank_offset], True
    domain, most = min(per_domain.items(), key=lambda item: (-item[1], item[0]))
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
    for domain in domains:
        start = max(domain * domain_size, topo.rank_offset)
        stop = min((domain + 1) * domain_size, end, start + DOMAIN_SAMPLE)
        seen = 0
        for kind in kinds:
            members: Counter[int] = Counter(
                topo.group_index(rank, kind)
                for rank in range(start, stop)
                if topo.has_group(rank, kind)
            )
            seen += sum(1 for n in members.values() if n > 1)
        if seen > best[0]:
            best = (seen, domain)
    return max(best[0], 0), best[1], False
