"""The transfer plan: which rank sends which slice of which weight to which rank (private).

For every weight the cut dims of both layouts are intersected part by part into *pieces*
``[lo, hi)``, each held by the ranks of one source shard (its *holders*) and needed by the ranks
of one destination shard (its *receivers*). A receiver that holds the piece already (colocated
layouts) needs nothing. When the allocation has an NVLink tier (an NVL72 rack), the others are
grouped by its domains and draw from the holders in their own domain when there are any, else
from every holder. (Hosts alone are not a preference: keeping each host's traffic inside it
costs balance, 1.12x the bound for Llama-70B tp8 x pp8 -> tp16 on 4-GPU hosts.)

Algorithm (balance): a piece needed by ``R`` receivers and held by ``H`` holders is cut into
``s = max(1, H // R)`` near-equal sub-pieces along the cut dim; of the ``R * s`` units each holder
serves ``floor(R * s / H)``, and ``(R * s) mod H`` of them one more, those taken in turn (a
rotation per holder set, carried from piece to piece). So every holder set carries its bytes
within one unit of evenly, whatever the number of weights. With an NVLink tier, a unit goes to a
holder in its receiver's domain while one has capacity left, else to any holder with capacity:
the preference never changes how many units each holder serves.

Lower bound (``max_send_bound``): the bytes whose holders all lie in a set ``U`` of ranks are sent
by ranks of ``U``, so some rank of ``U`` sends at least ``ceil(bytes(U) / |U|)``. The bound is the
largest of these over ``U`` = each holder set, each source stage (all its ranks) and the whole
source layout. ``max_recv_bound`` is the most bytes any receiver lacks, which it must receive.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from .._args import show
from .._errors import TopologyError
from .._megatron.topology import Topology
from .._preflight.allocation.model import Allocation
from .._preflight.allocation.rankmap import RankMap
from .params import Param
from .placement import param_placement, pieces

__all__ = ["Transfer", "TransferOp", "transfer"]

_Row = tuple[int, int, int, int, int, int, int, int]
"""(src, dst, param, lo, hi, src_lo, dst_lo, bytes): one op, compactly."""


@attrs.frozen
class TransferOp:
    """One message: ``src`` sends ``dst`` rows ``[start, stop)`` of weight ``param`` along its cut
    dim, found at ``src_start`` of the sender's shard and stored at ``dst_start`` of the
    receiver's (the other dims whole)."""

    src: int
    dst: int
    param: Param
    start: int
    stop: int
    src_start: int
    dst_start: int
    nbytes: int

    @property
    def src_slice(self) -> tuple[slice, ...]:
        """The slice of the sender's local shard (indexable on a tensor)."""
        return self._slice(self.src_start)

    @property
    def dst_slice(self) -> tuple[slice, ...]:
        """The slice of the receiver's local shard."""
        return self._slice(self.dst_start)

    @property
    def global_slice(self) -> tuple[slice, ...]:
        """The slice of the whole, unsharded weight."""
        return self._slice(self.start)

    def _slice(self, start: int) -> tuple[slice, ...]:
        dim = self.param.cut_dim
        return (slice(None),) * dim + (slice(start, start + self.stop - self.start),)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: ranks, the weight's name, the cut dim, the ranges and bytes."""
        return {
            "src": self.src,
            "dst": self.dst,
            "param": self.param.name,
            "dim": self.param.cut_dim,
            "start": self.start,
            "stop": self.stop,
            "src_start": self.src_start,
            "dst_start": self.dst_start,
            "bytes": self.nbytes,
        }


@attrs.frozen
class Transfer:
    """A plan from :func:`transfer`: its operations (in a deterministic order) and statistics."""

    src: Topology
    dst: Topology
    params: tuple[Param, ...]
    num_layers: int
    rows: tuple[_Row, ...] = attrs.field(repr=False)
    stats: dict[str, Any] = attrs.field(eq=False)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def ops(self) -> tuple[TransferOp, ...]:
        """Every operation, grouped by weight, then piece (then sender, without an NVLink tier)."""
        return tuple(self._op(row) for row in self.rows)

    def _op(self, row: _Row) -> TransferOp:
        src, dst, index, *rest = row
        return TransferOp(src, dst, self.params[index], *rest)

    def sends(self, rank: int) -> tuple[TransferOp, ...]:
        """What ``rank`` sends, in plan order (one side of a ``batch_isend_irecv``)."""
        return tuple(self._op(row) for row in self.rows if row[0] == rank)

    def recvs(self, rank: int) -> tuple[TransferOp, ...]:
        """What ``rank`` receives, in plan order."""
        return tuple(self._op(row) for row in self.rows if row[1] == rank)

    def held(self, rank: int) -> tuple[TransferOp, ...]:
        """What ``rank`` copies from its own source shard into its destination shard (colocated
        layouts): operations with ``src == dst == rank``, not part of :attr:`ops`."""
        found = []
        for param in self.params:
            have = _shard_of(self.src, param, rank, self.num_layers)
            want = _shard_of(self.dst, param, rank, self.num_layers)
            if have is None or want is None:
                continue
            for lo, hi, src_at in have:
                for a, z, dst_at in want:
                    start, stop = max(lo, a), min(hi, z)
                    if start < stop:
                        found.append(
                            TransferOp(
                                rank,
                                rank,
                                param,
                                start,
                                stop,
                                src_at + start - lo,
                                dst_at + start - a,
                                (stop - start) * param.row_bytes,
                            )
                        )
        return tuple(found)


def _shard_of(
    topology: Topology, param: Param, rank: int, num_layers: int
) -> list[tuple[int, int, int]] | None:
    """``(start, stop, local start)`` of each range ``rank`` holds of ``param``, or None."""
    for shard in param_placement(topology, param, num_layers=num_layers).shards:
        if rank in shard.ranks:
            local, found = 0, []
            for lo, hi in shard.ranges:
                found.append((lo, hi, local))
                local += hi - lo
            return found
    return None


def _rank_map(allocation: object, world: int) -> RankMap | None:
    if allocation is None or isinstance(allocation, RankMap):
        rank_map = allocation
    elif isinstance(allocation, Allocation):
        rank_map = allocation.rank_map(world)
    else:
        raise TopologyError(
            f"allocation must be an Allocation, a RankMap or None, got {show(allocation)} "
            f"({type(allocation).__name__}); give Allocation(...) or alloc.rank_map(n)"
        )
    if rank_map is not None and rank_map.world_size < world:
        raise TopologyError(
            f"allocation places {rank_map.world_size} ranks but the layouts use ranks up to "
            f"{world - 1}; give an allocation of at least {world} ranks"
        )
    return rank_map


def _check_params(params: object) -> tuple[Param, ...]:
    found = tuple(params) if isinstance(params, Iterable) else None
    if found is None or not found or not all(isinstance(p, Param) for p in found):
        raise TopologyError(
            f"params must be a non-empty sequence of Param, got {show(params)}; "
            "describe each weight with topology.Param"
        )
    return found


def _check_layouts(src: object, dst: object) -> None:
    for name, value in (("src", src), ("dst", dst)):
        if not isinstance(value, Topology):
            raise TopologyError(
                f"{name} must be a Topology, got {show(value)} ({type(value).__name__})"
            )


def _levels(rank_map: RankMap | None) -> tuple[list[str], list[Sequence[int]]]:
    """Tier names innermost first (``node``, the allocation's tiers, ``world``) and the domain
    label of every rank at each tier but ``world`` (a host of unknown domain: one of its own)."""
    if rank_map is None:
        return [], []
    names = ["node"] + [t.name for t in rank_map.tiers] + ["world"]
    labels: list[Sequence[int]] = [rank_map.nodes]
    labels += [rank_map.domain_ids(tier.name) for tier in rank_map.tiers]
    return names, labels


def _nvlink_level(rank_map: RankMap | None) -> int | None:
    """The index in :func:`_levels` of the innermost NVLink tier (an NVL72 rack), else None."""
    if rank_map is None:
        return None
    for position, tier in enumerate(rank_map.tiers):
        if tier.nvlink:
            return position + 1
    return None


def _tier_of(src: int, dst: int, labels: list[Sequence[int]]) -> int:
    """The innermost level whose domain holds both ranks (``len(labels)``: none, the world)."""
    for level, label in enumerate(labels):
        if label[src] == label[dst]:
            return level
    return len(labels)


class _Planner:
    """The mutable state of one planning pass: rotation counters and per-rank totals."""

    def __init__(
        self, src: Topology, dst: Topology, rank_map: RankMap | None, policy: str = "balanced"
    ) -> None:
        self.src, self.dst, self.policy = src, dst, policy
        self.names, self.labels = _levels(rank_map)
        level = _nvlink_level(rank_map)
        self.domain = self.labels[level] if level is not None else None
        self.rotation: dict[tuple[int, ...], int] = defaultdict(int)
        self.needed: dict[tuple[int, ...], int] = defaultdict(int)
        self.rows: list[_Row] = []

    def weight(self, index: int, param: Param, num_layers: int) -> None:
        """Plan every piece of one weight."""
        source = param_placement(self.src, param, num_layers=num_layers)
        target = param_placement(self.dst, param, num_layers=num_layers)
        holders: dict[int, tuple[int, ...]] = {}
        for shard in source.shards:
            holders[shard.index] = tuple(sorted({*holders.get(shard.index, ()), *shard.ranks}))
        receivers: dict[int, list[int]] = defaultdict(list)
        for shard in target.shards:
            receivers[shard.index].extend(shard.ranks)
        for lo, hi, a, b, src_at, dst_at in pieces(source, target):
            self.piece((index, lo, hi, src_at, dst_at), param.row_bytes, holders[a], receivers[b])

    def piece(
        self,
        where: tuple[int, int, int, int, int],
        row_bytes: int,
        holders: tuple[int, ...],
        receivers: Sequence[int],
    ) -> None:
        """Plan one piece ``[lo, hi)`` of a weight for the receivers that lack it."""
        held = set(holders)
        need = [r for r in receivers if r not in held]
        if not need:
            return
        index, lo, hi, src_lo, dst_lo = where
        self.needed[holders] += (hi - lo) * row_bytes * len(need)
        if self.policy != "balanced":
            self.baseline(where, row_bytes, holders, need)
            return
        n = len(holders)
        cuts = max(1, min(n // len(need), hi - lo))
        bounds = [lo + k * (hi - lo) // cuts for k in range(cuts + 1)]
        base, extra = divmod(len(need) * cuts, n)
        first = self.rotation[holders]
        self.rotation[holders] = (first + extra) % n
        order = holders[first:] + holders[:first]
        caps = [base + (i < extra) for i in range(n)]
        units = [(r, k) for r in need for k in range(cuts)]
        chosen = self.near(order, caps, units) if self.domain is not None else None
        if chosen is None:
            chosen = [i for i in range(n) for _ in range(caps[i])]
        for (r, k), i in zip(units, chosen, strict=True):
            a, z = bounds[k], bounds[k + 1]
            self.rows.append(
                (order[i], r, index, a, z, src_lo + a - lo, dst_lo + a - lo, (z - a) * row_bytes)
            )

    def near(
        self, order: tuple[int, ...], caps: list[int], units: list[tuple[int, int]]
    ) -> list[int]:
        """Which holder (position in ``order``) serves each unit: one in the receiver's NVLink
        domain while it has capacity left, else any holder with capacity (``caps`` is used up)."""
        assert self.domain is not None
        domain = self.domain
        mine: dict[int, list[int]] = defaultdict(list)
        for i, h in enumerate(order):
            mine[domain[h]].append(i)
        pointer: dict[int, int] = defaultdict(int)
        chosen: list[int] = [-1] * len(units)
        overflow = []
        for u, (r, _) in enumerate(units):
            key = domain[r]
            near = mine.get(key, ())
            for t in range(len(near)):
                i = near[(pointer[key] + t) % len(near)]
                if caps[i]:
                    caps[i] -= 1
                    chosen[u] = i
                    pointer[key] = (pointer[key] + t + 1) % len(near)
                    break
            else:
                overflow.append(u)
        i = 0
        for u in overflow:
            while not caps[i]:
                i += 1
            caps[i] -= 1
            chosen[u] = i
        return chosen

    def baseline(
        self,
        where: tuple[int, int, int, int, int],
        row_bytes: int,
        holders: tuple[int, ...],
        need: list[int],
    ) -> None:
        """The peers' source choices, for comparison: ``first`` (NeMo-RL: the first holder of
        each slice) or ``round-robin`` (Megatron's resharding: the receiver's position among the
        receivers, modulo the holders, afresh for every slice)."""
        index, lo, hi, src_lo, dst_lo = where
        for position, r in enumerate(need):
            sender = holders[0] if self.policy == "first" else holders[position % len(holders)]
            self.rows.append((sender, r, index, lo, hi, src_lo, dst_lo, (hi - lo) * row_bytes))

    def stats(self) -> dict[str, Any]:
        """Totals, per-rank maxima, their lower bounds and bytes per tier (see the module)."""
        sent: dict[int, int] = defaultdict(int)
        got: dict[int, int] = defaultdict(int)
        send_peers: dict[int, set[int]] = defaultdict(set)
        recv_peers: dict[int, set[int]] = defaultdict(set)
        by_tier = [0] * len(self.names)
        for src, dst, *_, nbytes in self.rows:
            sent[src] += nbytes
            got[dst] += nbytes
            send_peers[src].add(dst)
            recv_peers[dst].add(src)
            if self.labels:
                by_tier[_tier_of(src, dst, self.labels)] += nbytes
        total = sum(sent.values())
        return {
            "bytes_total": total,
            "ops": len(self.rows),
            "max_send_bytes": max(sent.values(), default=0),
            "max_send_bound": self.send_bound(total),
            "max_recv_bytes": max(got.values(), default=0),
            "max_recv_bound": max(got.values(), default=0),
            "max_send_peers": max((len(p) for p in send_peers.values()), default=0),
            "max_recv_peers": max((len(p) for p in recv_peers.values()), default=0),
            "senders": len(sent),
            "receivers": len(got),
            "bytes_by_tier": dict(zip(self.names, by_tier, strict=True)),
        }

    def send_bound(self, total: int) -> int:
        """The largest ``ceil(bytes(U) / |U|)`` over holder sets, source stages and the whole."""
        per_stage: dict[int, int] = defaultdict(int)
        bound = -(-total // self.src.world_size)
        for holders, nbytes in self.needed.items():
            bound = max(bound, -(-nbytes // len(holders)))
            stages = {self.src.stage(r) for r in (holders[0], holders[-1])}
            if len(stages) == 1:
                per_stage[stages.pop()] += nbytes
        stage_size = self.src.world_size // self.src.pp
        for nbytes in per_stage.values():
            bound = max(bound, -(-nbytes // stage_size))
        return bound


def transfer(
    src: Topology,
    dst: Topology,
    params: Sequence[Param],
    *,
    allocation: Allocation | RankMap | None = None,
    num_layers: int | None = None,
) -> Transfer:
    """The plan that moves every weight from layout ``src`` to layout ``dst``.

    The layouts may share ranks (colocated: what a rank already holds moves nothing) or not
    (give ``dst`` a ``rank_offset``). See the module for the balance and the bounds.

    Args:
        src, dst: the two layouts (training and generation, say).
        params: the weights (:class:`Param`), in the order the plan lists them.
        allocation: where ranks run (an :class:`Allocation` of both layouts' ranks, or its
            :class:`RankMap`): prefers a source in the receiver's domain of the innermost NVLink
            tier, if the allocation has one, and counts bytes per tier (``node``, the
            allocation's tiers, ``world``).
        num_layers: the model's transformer layers (default: one more than the largest
            ``param.layer``).

    Returns:
        A :class:`Transfer`.

    Raises:
        TopologyError: bad arguments, or a weight neither layout can shard (see
            :func:`param_placement`).

    >>> from topology import Topology
    >>> w = [Param("w", (8, 8), sharding="column", layer=0)]
    >>> plan = transfer(Topology(2, tp=2), Topology(2, tp=1, dp=2, rank_offset=2), w)
    >>> [(op.src, op.dst, op.start, op.stop) for op in plan.ops]
    [(0, 2, 0, 4), (0, 3, 0, 4), (1, 2, 4, 8), (1, 3, 4, 8)]
    >>> plan.stats["max_send_bytes"], plan.stats["max_send_bound"]
    (128, 128)
    """
    _check_layouts(src, dst)
    weights = _check_params(params)
    world = max(src.rank_offset + src.world_size, dst.rank_offset + dst.world_size)
    rank_map = _rank_map(allocation, world)
    if num_layers is None:
        num_layers = 1 + max((p.layer for p in weights if p.layer is not None), default=0)
    planner = _Planner(src, dst, rank_map)
    for index, param in enumerate(weights):
        planner.weight(index, param, num_layers)
    return Transfer(src, dst, weights, num_layers, tuple(planner.rows), planner.stats())
