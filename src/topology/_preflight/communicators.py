"""How many communicators a layout costs, per rank and per creation strategy (private).

Two kinds share a communicator when they give every rank the same rank set (with cp = 1,
``dp-cp`` is ``dp``); their groups are translates of the same offset set, so comparing the
canonical form of that set (:attr:`Shape.key`) decides it for all ranks at once. A singleton
group never needs a communicator.

The torch adapter creates exactly these communicators (``topology_torch._creation_plan``: one
split per kind reuses the ``shared`` twin, strategy ``"all"`` makes ``all``, strategy ``"local"``
makes ``rank_communicators`` on each rank); ``tests/torch/test_communicator_sharing.py`` ties
the two.

A kind without such a form (an ``intra-dp-cp`` chunk that cuts an axis unevenly) is compared
group by group, but only for the groups that cut one parent group (the others are translates);
rank sets of more than ``_COMPARE_LIMIT`` ranks are compared by their aligned pieces
(:meth:`Ranks.blocks`), so nothing large is ever enumerated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from .._args import show
from .._errors import TopologyError
from .._fields import pairs, whole
from .._layout.groups import Ranks
from .._megatron.kinds import spec_of
from .._megatron.shapes import shape_of
from .._megatron.topology import Topology

_COMPARE_LIMIT = 1 << 16
"""Rank sets up to this size are compared rank by rank; larger ones by their structure."""

_SAMPLE_CHUNKS = 64
"""At most this many groups of an irregular kind per parent group are compared."""

_EXACT_WORLD = 1 << 10
"""Layouts with an irregular kind are compared on every group and rank up to this world size."""

__all__ = [
    "Communicators",
    "communicators",
    "kind_names",
    "megatron_new_group_calls",
    "option_ids",
]


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

    per_rank_min: int = attrs.field(validator=whole(0))
    per_rank_max: int = attrs.field(validator=whole(0))
    all: int = attrs.field(validator=whole(0))
    local: int = attrs.field(validator=whole(0))
    megatron: int = attrs.field(validator=whole(0))
    shared: tuple[tuple[str, str], ...] = attrs.field(validator=pairs(str))

    def to_dict(self) -> dict[str, object]:
        """JSON-safe form (``shared`` as a mapping kind -> earlier kind)."""
        return {
            "per_rank_min": self.per_rank_min,
            "per_rank_max": self.per_rank_max,
            "strategies": {"all": self.all, "local": self.local},
            "megatron": self.megatron,
            "shared": dict(self.shared),
        }


Key = tuple[object, object]
"""A kind's settings token (its ``pg_options`` object, None without) and its canonical family
key (None for an irregular kind, compared by its groups)."""


def _keys(topo: Topology, options: Mapping[str, object] | None = None) -> dict[str, Key]:
    """Each kind's :data:`Key`: equal keys with a family key mean one communicator per group."""
    settings = {} if options is None else options
    keys: dict[str, Key] = {}
    for kind in topo.kinds:
        shape = shape_of(topo, kind)
        keys[kind] = (settings.get(kind), None if shape is None else shape.key)
    return keys


def _same(topo: Topology, keys: dict[str, Key], kind: str, other: str, rank: int) -> bool:
    """True if ``kind`` and ``other`` give ``rank`` the same communicator (ranks and settings)."""
    if keys[kind][0] != keys[other][0]:
        return False
    if keys[kind][1] is not None and keys[other][1] is not None:
        return keys[kind] == keys[other]
    if topo.size(kind) != topo.size(other):
        return False
    if not (topo.has_group(rank, kind) and topo.has_group(rank, other)):
        return False
    return _same_set(
        spec_of(kind).ranks_of(topo, kind, rank), spec_of(other).ranks_of(topo, other, rank)
    )


def _same_set(one: Ranks, other: Ranks) -> bool:
    """True if two ascending groups hold the same ranks (by structure when they are large)."""
    if len(one) != len(other):
        return False
    if len(one) <= _COMPARE_LIMIT:
        return one == other
    pieces = one.blocks()
    return pieces is not None and pieces == other.blocks()


def rank_communicators(
    topo: Topology, rank: int, *, separate: Iterable[str] = ()
) -> tuple[str, ...]:
    """The kinds that give ``rank`` a distinct non-singleton rank set (first kind of each set);
    a kind in ``separate`` never shares its communicator.

    >>> rank_communicators(Topology(8, tp=2, pp=2), 0)
    ('dp-cp', 'tp-pp', 'tp', 'pp', 'tp-dp-cp')
    >>> rank_communicators(Topology(8, tp=2, pp=2), 0, separate=("dp",))
    ('dp-cp', 'dp', 'tp-pp', 'tp', 'pp', 'tp-dp-cp')
    """
    return _rank_communicators(topo, _keys(topo), rank, kind_names(topo, separate, "separate"))


def kind_names(topo: Topology, names: Iterable[str], argument: str) -> frozenset[str]:
    """Canonical kind names of ``names`` (a sequence of kinds of ``topo``)."""
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise TopologyError(
            f"{argument} must be a sequence of kinds such as ('dp',), got {show(names)}"
        )
    return frozenset(topo.kind(name).name for name in names)


def option_ids(topo: Topology, pg_options: Mapping[str, object] | None) -> dict[str, object]:
    """Per kind given ``pg_options`` (``ProcessGroups.create``'s mapping of kinds to torch
    options objects), a token of its object: kinds share a communicator only when they have
    equal rank sets and the same object (compared by identity, as the adapter does)."""
    if pg_options is None:
        return {}
    if not isinstance(pg_options, Mapping):
        raise TopologyError(
            f"pg_options must map kinds to options objects, got {show(pg_options)}; "
            "e.g. pg_options={'dp-cp': options}"
        )
    return {topo.kind(name).name: ("options", id(value)) for name, value in pg_options.items()}


def _rank_communicators(
    topo: Topology, keys: dict[str, Key], rank: int, separate: frozenset[str] = frozenset()
) -> tuple[str, ...]:
    chosen: list[str] = []
    for kind in topo.kinds:
        if topo.size(kind) == 1 or not topo.has_group(rank, kind):
            continue
        if kind in separate or not any(
            _same(topo, keys, kind, other, rank) for other in chosen if other not in separate
        ):
            chosen.append(kind)
    return tuple(chosen)


def _per_parent(topo: Topology, kind: str) -> int:
    """How many groups of an irregular kind cut one parent group (dp-cp, edp or the world).

    Groups ``k * n .. k * n + n - 1`` cut parent group ``k`` the same way, and parent groups
    are translates of each other, so what holds for the first ``n`` groups holds for all.
    """
    return spec_of(kind).groups_per_parent(topo)


def _spread(count: int, limit: int = _SAMPLE_CHUNKS) -> list[int]:
    """``range(count)``, or ``limit`` evenly spread indices of it (first and last included)."""
    if count <= limit:
        return list(range(count))
    return sorted({i * (count - 1) // (limit - 1) for i in range(limit)})


def communicators(
    topo: Topology,
    *,
    separate: Iterable[str] = (),
    independent: Iterable[str] = (),
    pg_options: Mapping[str, object] | None = None,
) -> Communicators:
    """Count communicators per rank and per strategy; see :class:`Communicators`.

    ``separate`` and ``independent`` are :meth:`ProcessGroups.create
    <topology_torch.ProcessGroups.create>`'s: kinds whose groups share a communicator with no
    other kind, and kinds that get a second communicator of their own (equal copies of two
    kinds are one); ``pg_options`` maps kinds to their options objects, and kinds with equal
    groups share a communicator only with the same object (or none).

    Regular kinds are compared by their keys. A group of an irregular kind is new when it
    equals no group of another distinct kind (regular ones wherever they come in the order,
    irregular ones that come earlier). Up to ``_EXACT_WORLD`` ranks every group and rank is
    compared; beyond, the groups that cut the first parent group (at most 64 of them) stand
    for all, scaled up, and per-rank counts come from sample ranks (an estimate only for the
    rare layouts whose groups of other kinds cut the parents unevenly too).
    """
    keys = _keys(topo, option_ids(topo, pg_options))
    alone = kind_names(topo, separate, "separate")
    copies = kind_names(topo, independent, "independent")
    chosen: list[str] = []
    shared = []
    total = 0
    irregular: list[str] = []
    for kind in topo.kinds:
        if topo.size(kind) == 1:
            continue
        if kind in alone:
            total += len(topo.groups(kind))
            continue
        if keys[kind][1] is not None:
            twin = next((k for k in chosen if keys[k] == keys[kind]), None)
            if twin is None:
                chosen.append(kind)
                total += len(topo.groups(kind))
            else:
                shared.append((kind, twin))
            continue
        groups = topo.groups(kind)
        every = topo.world_size <= _EXACT_WORLD
        indices = (
            range(len(groups)) if every else _spread(min(len(groups), _per_parent(topo, kind)))
        )
        firsts = [groups.ranks(i)[0] for i in indices]
        twins = {
            next((k for k in chosen if _same(topo, keys, kind, k, first)), None) for first in firsts
        }
        if len(twins) == 1 and None not in twins:
            shared.append((kind, str(twins.pop())))
        else:
            chosen.append(kind)
            irregular.append(kind)
    for kind in irregular:
        groups = topo.groups(kind)
        others = [
            k
            for k in chosen
            if k != kind and (keys[k][1] is not None or k in irregular[: irregular.index(kind)])
        ]
        every = topo.world_size <= _EXACT_WORLD
        per_parent = len(groups) if every else min(len(groups), _per_parent(topo, kind))
        sample = range(per_parent) if every else _spread(per_parent)
        fresh = sum(
            not any(_same(topo, keys, kind, k, groups.ranks(i)[0]) for k in others) for i in sample
        )
        total += len(groups) // per_parent * per_parent * fresh // len(sample)
    copied = _copy_kinds(topo, keys, copies)
    total += sum(len(topo.groups(kind)) for kind in copied)
    ranks: Iterable[int] = _sample_ranks(topo, irregular)
    if irregular and topo.world_size <= _EXACT_WORLD:
        ranks = range(topo.rank_offset, topo.rank_offset + topo.world_size)
    per_rank = [
        len(_rank_communicators(topo, keys, rank, alone))
        + sum(topo.has_group(rank, kind) for kind in copied)
        for rank in ranks
    ]
    return Communicators(
        per_rank_min=min(per_rank),
        per_rank_max=max(per_rank),
        all=total,
        local=max(per_rank),
        megatron=megatron_new_group_calls(topo),
        shared=tuple(shared),
    )


def _copy_kinds(topo: Topology, keys: dict[str, Key], copies: frozenset[str]) -> list[str]:
    """The kinds of ``copies`` whose independent copy is a new communicator: non-singleton, and
    not equal to an earlier copied kind (copies of equal rank sets are one communicator)."""
    found: list[str] = []
    for kind in topo.kinds:
        if kind not in copies or topo.size(kind) == 1:
            continue
        key = keys[kind]
        if key[1] is None or all(keys[k] != key for k in found):
            found.append(kind)
    return found


def _sample_ranks(topo: Topology, irregular: list[str]) -> list[int]:
    """Ranks whose counts cover every rank's: one per stage class, and for each irregular kind
    the first rank of each group that cuts that rank's parent group."""
    ranks = []
    for stage in sorted({0, topo.pp - 1, *_middle(topo)}):
        rank = topo.dense.rank(**{**{a: 0 for a in topo.dense.axes}, "pp": stage})
        ranks.append(rank)
        for kind in irregular:
            groups = topo.groups(kind)
            per_parent = min(len(groups), _per_parent(topo, kind))
            start = topo.group_index(rank, kind) // per_parent * per_parent
            ranks += [groups.ranks(start + j)[0] for j in _spread(per_parent)]
    return ranks


def _middle(topo: Topology) -> set[int]:
    """The first stage of each embedding-membership class (at most four stages matter).

    Only the listed stages and the first stage listed nowhere can be first of a class, so the
    cost is the length of the stage lists, not pp.
    """
    listed = sorted({*topo.embedding_stages, *topo.position_embedding_stages})
    outside = next((s for s, t in enumerate(listed) if s != t), len(listed))
    candidates = sorted({*listed, *([outside] if outside < topo.pp else [])})
    classes: dict[tuple[bool, bool], int] = {}
    for stage in candidates:
        member = (stage in topo.embedding_stages, stage in topo.position_embedding_stages)
        classes.setdefault(member, stage)
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
