"""Where the groups of each kind land on nodes: one :class:`Placement` row per kind (private).

Every kind's groups are translates ``base + X`` of one offset set (a :class:`Shape`, read from the
kind table by :func:`~topology._megatron.shapes.shape_of`); how many nodes or NVLink domains a
translate touches is layout algebra (:mod:`topology._layout.spans`), computed in time independent of
the world size. A kind whose groups are no such family (an ``intra-dp-cp`` chunk that cuts an axis
unevenly) is measured group by group: on every group when the world is small and on the first,
middle and last groups otherwise (``exact`` says which).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from .._fields import flag, text, whole
from .._layout.ranks import Ranks
from .._layout.spans import ranks_units
from .._machine.cluster import Cluster
from .._megatron.shapes import shape_of
from .._megatron.topology import Topology

__all__ = ["Placement", "crosses_domains", "placement", "placements"]

_ENUMERATE_LIMIT = 1 << 16
"""Irregular kinds are measured on every group up to this many ranks, else on samples."""


def _as_ranks(ranks: Sequence[int]) -> Ranks:
    return Ranks.of(ranks)


@attrs.frozen
class Placement:
    """How one kind's groups sit on the cluster.

    ``nodes``/``domains`` are the most nodes / NVLink domains one group spans and ``nodes_min``
    the fewest; ``best_nodes`` is the fewest any placement could achieve (``ceil(size / G)``).
    ``example`` is a group that spans ``nodes`` nodes, as a lazy :class:`Ranks` (it equals the
    tuple of its ranks). ``exact`` is False only when a large world was measured on sample
    groups (an irregular kind, or more than ``RESIDUE_BUDGET`` distinct offsets of the groups
    against a huge node, see :mod:`topology._layout.spans`).

    >>> from topology import Cluster, Topology
    >>> row = placement(Topology(32, tp=8, order="dp-tp"), Cluster(8), "tp")
    >>> row.nodes, row.best_nodes, row.intra_node, row.example
    (4, 1, False, (0, 4, 8, 12, 16, 20, 24, 28))
    """

    kind: str = attrs.field(validator=text)
    size: int = attrs.field(validator=whole(1))
    groups: int = attrs.field(validator=whole(1))
    nodes: int = attrs.field(validator=whole(0))
    nodes_min: int = attrs.field(validator=whole(0))
    best_nodes: int = attrs.field(validator=whole(0))
    domains: int = attrs.field(validator=whole(0))
    example: Ranks = attrs.field(converter=_as_ranks)
    exact: bool = attrs.field(default=True, validator=flag)

    @property
    def intra_node(self) -> bool:
        """True if every group stays inside one node."""
        return self.nodes == 1

    @property
    def intra_domain(self) -> bool:
        """True if every group stays inside one NVLink domain."""
        return self.domains == 1

    def to_dict(self) -> dict[str, object]:
        """JSON-safe: every field plus ``intra_node``/``intra_domain``; ``example`` cut at 64."""
        return {
            "kind": self.kind,
            "size": self.size,
            "groups": self.groups,
            "nodes": self.nodes,
            "nodes_min": self.nodes_min,
            "best_nodes": self.best_nodes,
            "domains": self.domains,
            "intra_node": self.intra_node,
            "intra_domain": self.intra_domain,
            "example": list(self.example[:64]),
            "example_size": len(self.example),
            "exact": self.exact,
        }


def placement(topo: Topology, cluster: Cluster, kind: str) -> Placement:
    """The :class:`Placement` of ``kind``'s groups on ``cluster``, in time independent of W."""
    node = cluster.gpus_per_node
    domain = cluster.domain_size
    size = topo.size(kind)
    shape = shape_of(topo, kind)
    if shape is None:
        return _sampled(topo, kind, node, domain)
    most, base, fewest, exact = shape.extremes(node)
    domains, _, _, exact_domains = shape.extremes(domain)
    return Placement(
        kind=kind,
        size=size,
        groups=len(topo.groups(kind)),
        nodes=most,
        nodes_min=fewest,
        best_nodes=-(-size // node),
        domains=domains,
        example=shape.group(base),
        exact=exact and exact_domains,
    )


def _sampled(topo: Topology, kind: str, node: int, domain: int) -> Placement:
    groups = topo.groups(kind)
    count = len(groups)
    exact = topo.world_size <= _ENUMERATE_LIMIT
    indices = range(count) if exact else sorted({0, count // 2, count - 1})
    measured = []
    for index in indices:
        group = groups.ranks(index)
        nodes, sure_nodes = ranks_units(group, node)
        domains, sure_domains = ranks_units(group, domain)
        exact = exact and sure_nodes and sure_domains
        measured.append((nodes, domains, group))
    worst = max(measured, key=lambda m: m[0])
    size = topo.size(kind)
    return Placement(
        kind=kind,
        size=size,
        groups=count,
        nodes=worst[0],
        nodes_min=min(m[0] for m in measured),
        best_nodes=-(-size // node),
        domains=max(m[1] for m in measured),
        example=worst[2],
        exact=exact,
    )


def placements(topo: Topology, cluster: Cluster) -> tuple[Placement, ...]:
    """One :class:`Placement` per kind, in ``topo.kinds`` order."""
    return tuple(placement(topo, cluster, kind) for kind in topo.kinds)


def crosses_domains(topo: Topology, cluster: Cluster, kind: str) -> bool:
    """True if some group of ``kind`` holds ranks of two NVLink domains (nodes by default).

    The question ``placement(topo, cluster, kind).domains > 1`` answers, answered exactly even
    where that row is sampled (every offset of the groups against the domain is measured, by
    :meth:`Shape.leaves`); an irregular kind falls back to its placement row.

    >>> crosses_domains(Topology(16, tp=2), Cluster(8), "tp")
    False
    >>> crosses_domains(Topology(16, tp=2), Cluster(8), "dp")
    True
    """
    shape = shape_of(topo, kind)
    if shape is None:
        return placement(topo, cluster, kind).domains > 1
    return shape.leaves(cluster.domain_size)
