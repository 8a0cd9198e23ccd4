"""How many communicators a layout costs, per rank and per creation strategy (private).

Two kinds share a communicator when they give every rank the same rank set (with cp = 1,
``dp-cp`` is ``dp``); their groups are translates of the same offset set, so comparing the
canonical form of that set (:attr:`Shape.key`) decides it for all ranks at once. A singleton
group never needs a communicator.
"""

from __future__ import annotations

import attrs

from ._placement import shape_of
from ._topology import Topology

__all__ = ["Communicators", "communicators", "megatron_new_group_calls"]


@attrs.frozen
class Communicators:
    """Communicator counts of one layout.

    Attributes:
        per_rank_min, per_rank_max: distinct non-singleton rank sets one rank belongs to over
            all kinds (ranks differ only by embedding membership).
        all: ``new_group`` calls of strategy ``"all"``: every distinct non-singleton group once.
        local: ``new_group`` calls of strategy ``"local"`` on the busiest rank (members only).
        megatron: ``new_group`` calls Megatron-core's ``initialize_model_parallel`` makes on
            every rank for the same layout (gloo companions included).
        shared: groups of kinds that coincide with an earlier kind, as ``(kind, earlier kind)``.

    >>> counts = communicators(Topology(16, tp=2, pp=4))
    >>> counts.per_rank_max, counts.all, counts.megatron
    (6, 30, 137)
    """

    per_rank_min: int
    per_rank_max: int
    all: int
    local: int
    megatron: int
    shared: tuple[tuple[str, str], ...]

    def to_dict(self) -> dict[str, object]:
        """JSON-safe form (``shared`` as a mapping kind -> earlier kind)."""
        return {
            "per_rank_min": self.per_rank_min,
            "per_rank_max": self.per_rank_max,
            "strategies": {"all": self.all, "local": self.local},
            "megatron": self.megatron,
            "shared": dict(self.shared),
        }


def _keys(topo: Topology) -> dict[str, object]:
    """Each kind's canonical key; None for an irregular kind (compared by its groups)."""
    keys: dict[str, object] = {}
    for kind in topo.kinds:
        shape = shape_of(topo, kind)
        keys[kind] = None if shape is None else shape.key
    return keys


def _same(topo: Topology, keys: dict[str, object], kind: str, other: str, rank: int) -> bool:
    """True if ``kind`` and ``other`` give ``rank`` the same rank set."""
    if keys[kind] is not None and keys[other] is not None:
        return keys[kind] == keys[other]
    if topo.size(kind) != topo.size(other):
        return False
    if not (topo.has_group(rank, kind) and topo.has_group(rank, other)):
        return False
    return set(topo.group_of(rank, kind)) == set(topo.group_of(rank, other))


def rank_communicators(topo: Topology, rank: int) -> tuple[str, ...]:
    """The kinds that give ``rank`` a distinct non-singleton rank set (first kind of each set).

    >>> rank_communicators(Topology(8, tp=2, pp=2), 0)
    ('dp-cp', 'tp-pp', 'tp', 'pp', 'tp-dp-cp')
    """
    keys = _keys(topo)
    chosen: list[str] = []
    for kind in topo.kinds:
        if topo.size(kind) == 1 or not topo.has_group(rank, kind):
            continue
        if not any(_same(topo, keys, kind, other, rank) for other in chosen):
            chosen.append(kind)
    return tuple(chosen)


def communicators(topo: Topology) -> Communicators:
    """Count communicators per rank and per strategy; see :class:`Communicators`."""
    keys = _keys(topo)
    chosen: list[str] = []
    shared = []
    total = 0
    for kind in topo.kinds:
        if topo.size(kind) == 1:
            continue
        if keys[kind] is not None:
            twin = next((k for k in chosen if keys[k] == keys[kind]), None)
            if twin is None:
                chosen.append(kind)
                total += len(topo.groups(kind))
            else:
                shared.append((kind, twin))
            continue
        # Irregular: compare each group with the earlier kinds' groups of its first rank.
        twins = set()
        fresh = 0
        for group in topo.groups(kind):
            twin = next((k for k in chosen if _same(topo, keys, kind, k, group[0])), None)
            if twin is None:
                fresh += 1
            twins.add(twin)
        total += fresh
        if twins == {None} or len(twins) > 1:
            chosen.append(kind)
        else:
            shared.append((kind, str(twins.pop())))
    per_rank = []
    for stage in sorted({0, topo.pp - 1, *_middle(topo)}):
        rank = topo.dense.rank(**{**{a: 0 for a in topo.dense.axes}, "pp": stage})
        per_rank.append(len(rank_communicators(topo, rank)))
    return Communicators(
        per_rank_min=min(per_rank),
        per_rank_max=max(per_rank),
        all=total,
        local=max(per_rank),
        megatron=megatron_new_group_calls(topo),
        shared=tuple(shared),
    )


def _middle(topo: Topology) -> set[int]:
    """One stage of each embedding-membership class (at most four stages matter)."""
    classes: dict[tuple[bool, bool], int] = {}
    for stage in range(topo.pp):
        member = (stage in topo.embedding_stages, stage in topo.position_embedding_stages)
        classes.setdefault(member, stage)
        if len(classes) == 4:
            break
    return set(classes.values())


def megatron_new_group_calls(topo: Topology, *, gloo: bool = True) -> int:
    """``torch.distributed.new_group`` calls of Megatron-core 0.16's ``initialize_model_parallel``.

    Megatron calls ``new_group`` on every rank once per group of every kind it builds,
    singletons included. With ``n(k) = W / size(k)`` groups of kind ``k``, ``g = 1`` when gloo
    companions are made (``create_gloo_process_groups=True``, the default) and ``N`` distributed
    optimizer instances::

        calls = n(dp-cp)(1 + g) + [N > 1] n(dp-cp) N (1 + g)             # dp-cp, intra-dp-cp
              + n(dp)(1 + g) + n(cp) (1 + sum_l cp / h_l)                 # dp, cp, hcp levels
              + n(tp-pp) + n(tp) + 3 n(pp)                                # mp, tp, pp, embd, pos
              + n(tp-dp-cp) + n(tp-dp) + n(tp-cp)
              + n(ep) + n(etp) + n(etp-ep) + n(etp-ep-pp)
              + n(edp)(1 + g) + [N > 1] n(edp)(N + edp / N)(1 + g)       # edp, intra/inter
              + N                                                         # intra-dist-opt

    >>> megatron_new_group_calls(Topology(8, tp=2, pp=2))
    77
    """
    world = topo.world_size
    companions = 2 if gloo else 1
    instances = topo.dist_opt_instances

    def n(kind: str) -> int:
        return world // topo.size(kind)

    calls = n("dp-cp") * companions + n("dp") * companions
    if instances > 1:
        calls += n("dp-cp") * instances * companions
        calls += n("edp") * (instances + topo.edp // instances) * companions
    calls += n("cp") * (1 + sum(topo.cp // h for h in topo.hcp_sizes or ()))
    calls += n("tp-pp") + n("tp") + 3 * n("pp")
    calls += n("tp-dp-cp") + n("tp-dp") + n("tp-cp")
    calls += n("ep") + n("etp") + n("etp-ep") + n("etp-ep-pp")
    calls += n("edp") * companions + instances
    return calls
