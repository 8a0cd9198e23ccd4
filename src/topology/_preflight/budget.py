"""What a layout's communicators cost before launch: GPU memory per rank and NVLS multicast
groups per NVLink domain (private).

- Memory: every distinct communicator a rank joins holds its own NCCL buffers. NVIDIA/nccl#964
  measured 544 MB for a 2-rank and 688 MB for a larger communicator on A100 NVLink (channels and
  algorithms change it, NVIDIA/nccl#986); :data:`NCCL_MEMORY` is the larger figure, and callers
  may give their own.
- NVLS: on NVSwitch systems every communicator that uses NVLink SHARP takes a multicast object
  on the switch of each NVLink domain it has two or more ranks in; an NVSwitch has
  :data:`NVLS_LIMIT` of them (NVIDIA/nccl#2077, pytorch/pytorch#187155), and duplicates of one
  rank set each take their own. We count, per NVLink domain, the distinct communicators
  ``ProcessGroups.create`` makes (kinds with equal groups count once, unless ``separate`` or
  their own ``pg_options`` part them; an ``independent`` kind counts twice) with two or more
  ranks in it: an upper bound on what NCCL allocates, since it may choose another algorithm.

>>> from topology import Topology
>>> most, domain, exact = nvls_groups(Topology(16, tp=2, pp=2), [r // 8 for r in range(16)])
>>> most, domain, exact
(11, 0, True)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._megatron.shapes import shape_of
from .._megatron.topology import Topology
from .communicators import kind_names, option_ids
from .crossings import distinct_kinds

__all__ = [
    "DOMAIN_SAMPLE",
    "NCCL_MEMORY",
    "NVLS_LIMIT",
    "families",
    "nvls_groups",
    "nvls_groups_in",
    "nvls_groups_sampled",
]

NCCL_MEMORY = 688e6
"""Bytes of GPU memory one NCCL communicator holds (NVIDIA/nccl#964, A100, more than 2 ranks)."""

NVLS_LIMIT = 128
"""NVLink SHARP multicast groups one NVSwitch domain can hold (NVIDIA/nccl#2077)."""

DOMAIN_SAMPLE = 1 << 12
"""A sampled domain is measured on at most this many of its ranks."""


Token = tuple[object, ...]
"""What sets one kind's communicators apart from another kind's with the same ranks: its copy
number and its settings (``("alone", kind)`` for a separate kind, ``("options", id)`` for a
kind given ``pg_options``), exactly as ``ProcessGroups.create`` keys a communicator."""


def families(
    topo: Topology,
    *,
    separate: Iterable[str] = (),
    independent: Iterable[str] = (),
    pg_options: Mapping[str, object] | None = None,
) -> list[tuple[str, Token]]:
    """The communicator families ``create`` makes: per non-singleton kind its main
    communicators, and a second copy for each ``independent`` kind, with their tokens.

    A family whose groups and token equal an earlier family's is left out (one communicator),
    as the adapter makes it; a separate kind, or one with its own ``pg_options`` object, never
    shares.

    >>> [kind for kind, _ in families(Topology(8, tp=2, pp=2), independent=("dp",))]
    ['dp-cp', 'tp-pp', 'tp', 'pp', 'tp-dp-cp', 'dp']
    """
    alone = kind_names(topo, separate, "separate")
    copies = kind_names(topo, independent, "independent")
    options = option_ids(topo, pg_options)
    first = distinct_kinds(topo, topo.kinds)
    found: list[tuple[str, Token]] = []
    seen: set[tuple[str, Token]] = set()
    for copy in (0, 1):
        for kind in topo.kinds:
            if topo.size(kind) == 1 or (copy and kind not in copies):
                continue
            setting: object = options.get(kind)
            if kind in alone and not copy:
                setting = ("alone", kind)
            token: Token = (copy, setting)
            if (first[kind], token) not in seen:
                seen.add((first[kind], token))
                found.append((kind, token))
    return found


def _busy(topo: Topology, ranks: Iterable[int], chosen: list[tuple[str, Token]]) -> int:
    """How many communicators of ``chosen`` hold two or more of ``ranks`` (ascending ranks of
    the layout), counting each rank's group by the kind table's lookup; time O(ranks x kinds)."""
    by_ranks = any(shape_of(topo, kind) is None for kind, _ in chosen)
    ranks = list(ranks)
    found: set[object] = set()
    for kind, token in chosen:
        members: Counter[int] = Counter(
            topo.group_index(rank, kind) for rank in ranks if topo.has_group(rank, kind)
        )
        for index, n in members.items():
            if n > 1:
                found.add((token, _identity(topo, kind, index, by_ranks)))
    return len(found)


def _identity(topo: Topology, kind: str, index: int, by_ranks: bool) -> object:
    """What makes a group one communicator: its ranks where an irregular kind may repeat another
    kind's group (and the group is small enough to list), else its family and index."""
    if by_ranks and topo.size(kind) <= DOMAIN_SAMPLE:
        return tuple(topo.groups(kind)[index])
    shape = shape_of(topo, kind)
    return (kind if shape is None else shape.key, index)


def _busiest(counts: Iterable[tuple[int, int]], empty: int) -> tuple[int, int]:
    """``(most, domain)`` of ``(domain, count)`` pairs, the smallest domain on ties."""
    best = min(((-n, d) for d, n in counts), default=(0, empty))
    return -best[0], best[1] if best[0] else empty


def nvls_groups(topo: Topology, domain_of: Sequence[int], **plan: Any) -> tuple[int, int, bool]:
    """The most communicators with two or more ranks in one NVLink domain, that domain's label,
    and True (exact): every rank of every domain is measured, and equal rank sets (an
    ``intra-dp-cp`` chunk that is also a cp group) are one communicator, as the adapter makes
    them, unless ``separate``, ``independent`` or ``pg_options`` (the keywords of
    :func:`families`) give them communicators of their own.

    ``domain_of[r]`` labels the NVLink domain of global rank ``r`` (``rank_offset`` included).
    """
    chosen = families(topo, **plan)
    per_domain: dict[int, list[int]] = {}
    for rank in range(topo.rank_offset, topo.rank_offset + topo.world_size):
        per_domain.setdefault(domain_of[rank], []).append(rank)
    counts = ((d, _busy(topo, ranks, chosen)) for d, ranks in per_domain.items())
    most, domain = _busiest(counts, domain_of[topo.rank_offset])
    return most, domain, True


def nvls_groups_sampled(
    topo: Topology, domain_size: int, domains: Sequence[int], **plan: Any
) -> tuple[int, int, bool]:
    """:func:`nvls_groups` on consecutive domains of ``domain_size`` ranks, measured only on
    ``domains`` (their indices; for a world too large to walk) and, in a domain of more than
    :data:`DOMAIN_SAMPLE` ranks, only on its first ones (then a lower bound); exact is False.

    Each rank's group is found by the kind table's lookup (:meth:`Topology.group_index`), so
    the time is the ranks measured times the kinds, whatever the world size.
    """
    end = topo.rank_offset + topo.world_size
    spans = []
    for domain in domains:
        start = max(domain * domain_size, topo.rank_offset)
        spans.append((domain, range(start, min((domain + 1) * domain_size, end))))
    return nvls_groups_in(topo, spans, **plan)


def nvls_groups_in(
    topo: Topology, spans: Sequence[tuple[int, Sequence[int]]], **plan: Any
) -> tuple[int, int, bool]:
    """:func:`nvls_groups` measured only on the domains of ``spans`` (``(label, its ascending
    ranks)`` pairs), each on at most its first :data:`DOMAIN_SAMPLE` ranks; exact is False."""
    chosen = families(topo, **plan)
    counts = []
    for domain, ranks in spans:
        counts.append((domain, _busy(topo, ranks[:DOMAIN_SAMPLE], chosen)))
    found = [(d, n) for d, n in counts if n]
    if not found:
        return 0, spans[0][0] if spans else 0, False
    best = max(n for _, n in found)
    return best, next(d for d, n in counts if n == best), False
