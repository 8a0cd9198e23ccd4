"""The planning pass behind :func:`topology.transfer` (private).

The operations of a weight depend on its param only through its row bytes: weights whose
placements agree on both sides (same sharding grid, parts, stages, expert coordinate and GTP
cut: :func:`placement_key`, a *class*) are cut into the same pieces with the same holders and
receivers. So the pass works in three sizes of unit, each computed once:

- a class: its pieces ``(lo, hi, src_lo, dst_lo)`` (and the dim-0 rows of a 2-D block, under
  GTP of a row-parallel weight, whose bytes per index are those rows' share) with their holder
  set and the receivers lacking them (one :func:`param_placement` per side per class,
  intersected by :func:`pieces`: under GTP a shard index is ``tp * G + gtp`` and a holder of
  only padding has no piece);
- a pattern: who sends each unit of a piece, for one (holders, receivers) pair, cut count and
  rotation start (:class:`Pattern`); the balance rule and the NVLink preference run here;
- a block: one piece of one weight, which pattern serves it (:data:`Block`).

A plan is its blocks; an operation is one unit of one block, made only when asked for. The
statistics add up each pattern's bytes per unit over its blocks, then walk each pattern once.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections import defaultdict
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import Any

import attrs

from .._machine.rankmap import RankMap
from .._megatron.split.split import PipelineSplit
from .._megatron.topology import Topology
from .bounds import peer_bounds, send_bound
from .param_placement import (
    LayoutTarget,
    PlacementKeys,
    ShardRuns,
    Target,
    param_placement,
    runs_ranks,
    shard_runs,
)
from .params import Param
from .relay import Relay

__all__ = [
    "Block",
    "ClassPiece",
    "Pattern",
    "Planner",
    "Row",
    "Rows",
    "block_bytes",
    "block_rows",
    "bulk",
    "cut_bounds",
    "levels",
    "nvlink_level",
    "rows_bytes",
    "tally",
    "tier_of",
    "turn",
    "unit_row",
]

Rows = tuple[int, int, int, int]
"""(start, stop, src_start, dst_start) along dim 0: the GTP rows of a 2-D block (see
:data:`~topology._transfer.param_placement.Piece`)."""

Row = (
    tuple[int, int, int, int, int, int, int, int]
    | tuple[int, int, int, int, int, int, int, int, Rows]
)
"""(src, dst, param, lo, hi, src_lo, dst_lo, bytes[, rows]): one op, compactly (``rows`` only for
a 2-D block)."""


@attrs.frozen
class Pattern:
    """Who serves each unit of a piece: unit ``u`` is sub-piece ``u % cuts`` for receiver
    ``need[u // cuts]``, sent by ``senders[u]``. One object serves every block of its key."""

    senders: tuple[int, ...]
    need: tuple[int, ...]
    cuts: int
    stage: int = 1
    """1: a sender sends from its source shard; 2 (a relay copy): a sender sends from its
    destination shard what it received in stage 1 (see :mod:`topology._transfer.relay`)."""

    def units(self) -> Iterator[tuple[int, int, int]]:
        """``(sender, receiver, sub-piece)`` of each unit, in order."""
        cuts = self.cuts
        for u, s in enumerate(self.senders):
            yield s, self.need[u // cuts], u % cuts

    @functools.cached_property
    def by_sender(self) -> dict[int, list[int]]:
        """The units each sender sends, ascending."""
        found: dict[int, list[int]] = defaultdict(list)
        for u, s in enumerate(self.senders):
            found[s].append(u)
        return found

    @functools.cached_property
    def _positions(self) -> dict[int, int]:
        return {r: position for position, r in enumerate(self.need)}

    def received_by(self, rank: int) -> range:
        """The units ``rank`` receives (a receiver of the pattern)."""
        position = self._positions[rank]
        return range(position * self.cuts, (position + 1) * self.cuts)


Block = tuple[int, int, int, int, int, Pattern, Rows | None]
"""(param index, lo, hi, src_lo, dst_lo, pattern, rows): one piece of one weight (``rows``: its
dim-0 range when it is a 2-D block, else None)."""

ClassPiece = tuple[int, int, int, int, int, Rows | None]
"""(lo, hi, src_lo, dst_lo, pair id, rows) of a class: a pair is one (holders, need)."""


def cut_bounds(lo: int, hi: int, cuts: int) -> list[int]:
    """The ``cuts + 1`` near-equal bounds of ``[lo, hi)``."""
    return [lo + k * (hi - lo) // cuts for k in range(cuts + 1)]


def rows_bytes(param: Param, rows: Sequence[int] | None) -> int:
    """Bytes per index of the cut dim over dim-0 rows ``[rows[0], rows[1])`` (a 2-D GTP block;
    None: every row): the weight's row bytes times that share of dim 0."""
    if rows is None:
        return param.row_bytes
    return param.row_bytes // param.shape[0] * (rows[1] - rows[0])


def block_bytes(block: Block, param: Param) -> int:
    """Bytes per index of the cut dim in one block (:func:`rows_bytes` of its rows)."""
    return rows_bytes(param, block[6])


def block_rows(block: Block, row_bytes: int) -> Iterator[Row]:
    """Every op of one block, in plan order (``row_bytes``: :func:`block_bytes`)."""
    rows = block[6]
    flat = _flat_rows(block, row_bytes)
    return flat if rows is None else ((*row, rows) for row in flat)


def _flat_rows(
    block: Block, row_bytes: int
) -> Iterator[tuple[int, int, int, int, int, int, int, int]]:
    """The ops of one block without their rows."""
    index, lo, hi, src_lo, dst_lo, pattern, _ = block
    if pattern.cuts == 1:
        nbytes = (hi - lo) * row_bytes
        for s, r in zip(pattern.senders, pattern.need, strict=True):
            yield s, r, index, lo, hi, src_lo, dst_lo, nbytes
        return
    bounds = cut_bounds(lo, hi, pattern.cuts)
    for s, r, k in pattern.units():
        a, z = bounds[k], bounds[k + 1]
        yield s, r, index, a, z, src_lo + a - lo, dst_lo + a - lo, (z - a) * row_bytes


def unit_row(block: Block, row_bytes: int, u: int) -> Row:
    """Unit ``u`` of one block as an op (``row_bytes``: :func:`block_bytes`)."""
    index, lo, hi, src_lo, dst_lo, pattern, rows = block
    cuts = pattern.cuts
    a, z = (lo, hi) if cuts == 1 else cut_bounds(lo, hi, cuts)[u % cuts : u % cuts + 2]
    sender, receiver = pattern.senders[u], pattern.need[u // cuts]
    row = sender, receiver, index, a, z, src_lo + a - lo, dst_lo + a - lo, (z - a) * row_bytes
    return row if rows is None else (*row, rows)


def turn(holders: int, receivers: int, length: int) -> tuple[int, int]:
    """A piece's cut count and how far it turns its holder set's rotation: ``length`` indices
    of the cut dim for ``receivers`` ranks from ``holders`` ranks are cut into as many units per
    receiver as keep every holder busy (at most one per index), and the next piece of those
    holders starts past the holders these units took.

    >>> turn(8, 2, 100), turn(8, 2, 3), turn(2, 4, 100)
    ((4, 0), (3, 6), (1, 0))
    """
    cuts = max(1, min(holders // receivers, length))
    return cuts, receivers * cuts % holders


@contextlib.contextmanager
def bulk() -> Iterator[None]:
    """Pause the cyclic garbage collector while millions of acyclic tuples are made (its passes
    over them, not their making, took 70% of the time), then restore it as it was."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def levels(rank_map: RankMap | None) -> tuple[list[str], list[Sequence[int]]]:
    """Tier names innermost first (``node``, the allocation's tiers, ``world``) and the domain
    label of every rank at each tier but ``world`` (a host of unknown domain: one of its own)."""
    if rank_map is None:
        return [], []
    names = ["node"] + [t.name for t in rank_map.tiers] + ["world"]
    labels: list[Sequence[int]] = [rank_map.nodes]
    labels += [rank_map.domain_ids(tier.name) for tier in rank_map.tiers]
    return names, labels


def nvlink_level(rank_map: RankMap | None) -> int | None:
    """The index in :func:`levels` of the innermost NVLink tier (an NVL72 rack), else None."""
    if rank_map is None:
        return None
    for position, tier in enumerate(rank_map.tiers):
        if tier.nvlink:
            return position + 1
    return None


def tier_of(src: int, dst: int, labels: list[Sequence[int]]) -> int:
    """The innermost level whose domain holds both ranks (``len(labels)``: none, the world)."""
    for level, label in enumerate(labels):
        if label[src] == label[dst]:
            return level
    return len(labels)


class Planner:
    """The mutable state of one planning pass: classes, patterns, rotations and blocks."""

    def __init__(
        self,
        src: Topology,
        dst: Topology,
        rank_map: RankMap | None,
        splits: tuple[PipelineSplit | None, PipelineSplit | None] = (None, None),
        target: Target | None = None,
        relay: bool = False,
    ) -> None:
        self.src, self.dst = src, dst
        self.splits = splits
        """Each side's pipeline split (:class:`PipelineSplit`, None: even)."""
        self.target: Target = target if target is not None else LayoutTarget(dst, splits[1])
        """Where the destination holds each weight (default: ``dst`` under its split)."""
        self.names, self.labels = levels(rank_map)
        level = nvlink_level(rank_map)
        self.domain = self.labels[level] if level is not None else None
        self.classes: dict[tuple[Hashable, Hashable], list[ClassPiece]] = {}
        self.sources: dict[Hashable, ShardRuns] = {}
        """Per class key of the source layout (:func:`placement_key`): its placement's runs."""
        self.targets: dict[Hashable, ShardRuns] = {}
        """Per class key of the destination (``Target.key``): its placement's runs."""
        self.holder_sets: dict[tuple[int, ...], int] = {}
        self.holder_list: list[tuple[int, ...]] = []
        self.pairs: dict[tuple[int, tuple[int, ...]], int] = {}
        self.pair_list: list[tuple[int, tuple[int, ...]]] = []
        self.rotation: list[int] = []
        self.needed: list[int] = []
        self.patterns: dict[tuple[int, int, int], tuple[Pattern, list[int]]] = {}
        """Per (pair, cuts, rotation start): the pattern and its bytes per unit, over blocks."""
        self.blocks: list[Block] = []
        self.ops = 0
        self._keys: dict[int, tuple[PlacementKeys, PlacementKeys | None]] = {}
        """Per model depth: each side's :class:`PlacementKeys`."""
        self.relay = (
            Relay(self.labels[level if level is not None else 0])
            if relay and rank_map is not None
            else None
        )
        """Who relays (None: every receiver gets its pieces over the network)."""
        self.relay_blocks: list[Block] = []
        """The relay copies (stage 2), one block per relayed piece."""
        self.relay_patterns: dict[tuple[tuple[int, ...], tuple[int, ...]], list[Any]] = {}
        """Per (relays, their receivers): the stage-2 pattern and its bytes, over blocks."""
        self.relay_ops = 0

    def weight(self, index: int, param: Param, num_layers: int) -> None:
        """Plan every piece of one weight."""
        key = self.class_key(param, num_layers)
        pieces = self.classes.get(key)
        if pieces is None:
            pieces = self.classes[key] = self._pieces(param, num_layers, key)
        row_bytes = param.row_bytes
        for lo, hi, src_lo, dst_lo, pair, rows in pieces:
            if rows is None:
                self._block((index, lo, hi, src_lo, dst_lo), row_bytes, pair)
            else:
                self._block((index, lo, hi, src_lo, dst_lo), rows_bytes(param, rows), pair, rows)

    def class_key(self, param: Param, num_layers: int) -> tuple[Hashable, Hashable]:
        """``param``'s class: its source and destination placement keys."""
        keys = self._keys.get(num_layers)
        if keys is None:
            target = self.target
            keys = self._keys[num_layers] = (
                PlacementKeys(self.src, num_layers, self.splits[0]),
                PlacementKeys(target.topology, num_layers, target.pipeline_split)
                if isinstance(target, LayoutTarget)
                else None,
            )
        dst_key = keys[1].key(param) if keys[1] is not None else self.target.key(param, num_layers)
        return (keys[0].key(param), dst_key)

    def source(self, key: Hashable, param: Param, num_layers: int) -> ShardRuns:
        """The source placement's runs of ``param``, whose source key is ``key`` (made once
        per key)."""
        source = self.sources.get(key)
        if source is None:
            source = self.sources[key] = shard_runs(
                param_placement(
                    self.src, param, num_layers=num_layers, pipeline_split=self.splits[0]
                )
            )
        return source

    def destination(self, key: Hashable, param: Param, num_layers: int) -> ShardRuns:
        """The destination placement's runs of ``param``, whose destination key is ``key``
        (made once per key)."""
        target = self.targets.get(key)
        if target is None:
            target = self.targets[key] = shard_runs(self.target.placement(param, num_layers))
        return target

    def _pieces(
        self, param: Param, num_layers: int, key: tuple[Hashable, Hashable]
    ) -> list[ClassPiece]:
        """The pieces of one class that some receiver lacks, in plan order (``key``: the
        class's source and destination keys; each side's placement is made once per key)."""
        source = self.source(key[0], param, num_layers)
        target = self.destination(key[1], param, num_layers)
        found: list[ClassPiece] = []
        for lo, hi, src_lo, dst_lo, holders, receivers, rows in runs_ranks(
            source, target, param.shape[0]
        ):
            pair = self._pair(holders, receivers)
            if pair >= 0:
                found.append((lo, hi, src_lo, dst_lo, pair, rows))
        return found

    def _pair(self, holders: tuple[int, ...], receivers: Sequence[int]) -> int:
        """The id of (holders, ascending, the receivers not among them); -1 when every receiver
        holds it."""
        if receivers and (holders[-1] < min(receivers) or holders[0] > max(receivers)):
            need = tuple(receivers)  # the two sides' ranks apart: no receiver holds it
        else:
            held = set(holders)
            need = tuple(r for r in receivers if r not in held)
        if not need:
            return -1
        h = self.holder_sets.setdefault(holders, len(self.holder_sets))
        if h == len(self.holder_list):
            self.holder_list.append(holders)
            self.rotation.append(0)
            self.needed.append(0)
        key = (h, need)
        pair = self.pairs.setdefault(key, len(self.pairs))
        if pair == len(self.pair_list):
            self.pair_list.append(key)
        return pair

    def _block(
        self,
        where: tuple[int, int, int, int, int],
        row_bytes: int,
        pair: int,
        rows: Rows | None = None,
    ) -> None:
        """Plan one piece of one weight: pick (or make) its pattern and count its bytes
        (``row_bytes``: per index of the cut dim, of this piece's rows)."""
        lo, hi = where[1], where[2]
        if self.relay is not None:
            pair = self._relayed(where, row_bytes, pair, rows)
        h, need = self.pair_list[pair]
        self.needed[h] += (hi - lo) * row_bytes * len(need)
        n = len(self.holder_list[h])
        cuts, step = turn(n, len(need), hi - lo)
        first = self.rotation[h]
        self.rotation[h] = (first + step) % n
        self.keep(where, row_bytes, pair, cuts, first, rows)

    def _relayed(
        self, where: tuple[int, int, int, int, int], row_bytes: int, pair: int, rows: Rows | None
    ) -> int:
        """With a relay step: keep the relay copies of one piece (stage 2) and return the pair
        its network stage serves (the receivers less those a relay serves)."""
        assert self.relay is not None
        h, need = self.pair_list[pair]
        nbytes = (where[2] - where[1]) * row_bytes
        kept, copies = self.relay.route(pair, self.holder_list[h], need, nbytes)
        if not copies:
            return pair
        senders = tuple(s for s, _ in copies)
        others = tuple(r for _, r in copies)
        found = self.relay_patterns.get((senders, others))
        if found is None:
            found = self.relay_patterns[senders, others] = [
                Pattern(senders, others, 1, stage=2),
                0,
            ]
        found[1] += nbytes
        at = where[4]  # a relay sends from its destination shard
        copied = None if rows is None else (rows[0], rows[1], rows[3], rows[3])
        self.keep_relay((where[0], where[1], where[2], at, at, found[0], copied), row_bytes)
        self.relay_ops += len(senders)
        return self._pair(self.holder_list[h], kept)

    def keep_relay(self, block: Block, row_bytes: int) -> None:
        """Keep the block of one piece's relay copies (stage 2; ``row_bytes``: per index of the
        cut dim; one rank's pass keeps only its own units)."""
        self.relay_blocks.append(block)

    def keep(
        self,
        where: tuple[int, int, int, int, int],
        row_bytes: int,
        pair: int,
        cuts: int,
        first: int,
        rows: Rows | None,
    ) -> None:
        """Keep one planned piece: its pattern (``pair``, ``cuts``, rotation start ``first``),
        its bytes per unit for the statistics and its block (one rank's pass keeps only its own
        units: :class:`~topology._transfer.rank.RankPlanner`)."""
        lo, hi = where[1], where[2]
        found = self.patterns.get((pair, cuts, first))
        if found is None:
            found = self.patterns[pair, cuts, first] = (
                self.pattern(pair, cuts, first),
                [0] * cuts,
            )
        pattern, weights = found
        if cuts == 1:
            weights[0] += (hi - lo) * row_bytes
        else:
            bounds = cut_bounds(lo, hi, cuts)
            for k in range(cuts):
                weights[k] += (bounds[k + 1] - bounds[k]) * row_bytes
        self.blocks.append((*where, pattern, rows))
        self.ops += len(pattern.senders)

    def pattern(self, pair: int, cuts: int, first: int) -> Pattern:
        """Who sends each unit (see :mod:`topology._transfer.plan` for the balance rule)."""
        h, need = self.pair_list[pair]
        holders = self.holder_list[h]
        n = len(holders)
        base, extra = divmod(len(need) * cuts, n)
        order = holders[first:] + holders[:first]
        caps = [base + (i < extra) for i in range(n)]
        receivers = [r for r in need for _ in range(cuts)]
        chosen = self._near(order, caps, receivers) if self.domain is not None else None
        if chosen is None:
            chosen = [i for i in range(n) for _ in range(caps[i])]
        return Pattern(tuple(order[i] for i in chosen), need, cuts)

    def _near(self, order: tuple[int, ...], caps: list[int], receivers: list[int]) -> list[int]:
        """Which holder (position in ``order``) serves each unit: one in the receiver's NVLink
        domain while it has capacity left, else any holder with capacity (``caps`` is used up)."""
        assert self.domain is not None
        domain = self.domain
        mine: dict[int, list[int]] = defaultdict(list)
        for i, h in enumerate(order):
            mine[domain[h]].append(i)
        pointer: dict[int, int] = defaultdict(int)
        chosen: list[int] = [-1] * len(receivers)
        overflow = []
        for u, r in enumerate(receivers):
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

    def all_blocks(self) -> tuple[Block, ...]:
        """The plan's blocks: the network stage's, then the relay copies' (stage 2)."""
        return (*self.blocks, *self.relay_blocks)

    def stats(self) -> dict[str, Any]:
        """Totals, per-rank maxima, their lower bounds and bytes per tier (see the module; with
        a relay step, the bounds are those of the network stage, its sends and peers, which
        the relay copies only add to)."""
        holders = self.holder_list
        messages = (
            (s, r, weights[k])
            for pattern, weights in self.patterns.values()
            for s, r, k in pattern.units()
        )
        pairs = self.pair_list
        if self.relay is not None:  # the pairs the network stage serves, in order
            used = {pair for pair, _, _ in self.patterns}
            pairs = [key for pair, key in enumerate(pairs) if pair in used]
        found = tally(
            self.src,
            self.names,
            self.labels,
            messages,
            ops=self.ops,
            needed=zip(holders, self.needed, strict=True),
            demands=[(holders[h], need) for h, need in pairs],
            relayed=None if self.relay is None else (self._relay_messages(), self.relay_ops),
        )
        return found

    def _relay_messages(self) -> Iterator[tuple[int, int, int]]:
        """``(relay, receiver, bytes)`` of every relay copy, summed over blocks."""
        for pattern, nbytes in self.relay_patterns.values():
            for s, r in zip(pattern.senders, pattern.need, strict=True):
                yield s, r, nbytes


def tally(
    src: Topology,
    names: Sequence[str],
    labels: list[Sequence[int]],
    messages: Iterable[tuple[int, int, int]],
    *,
    ops: int,
    needed: Iterable[tuple[tuple[int, ...], int]],
    demands: Sequence[tuple[tuple[int, ...], tuple[int, ...]]],
    relayed: tuple[Iterable[tuple[int, int, int]], int] | None = None,
) -> dict[str, Any]:
    """A plan's statistics from its ``(sender, receiver, bytes)`` messages: totals, per-rank
    maxima and their lower bounds (``needed``: bytes per holder set; ``demands``: (holders,
    receivers lacking them) pairs), and bytes per tier of ``labels`` (:func:`levels`).
    ``relayed``: the relay copies' messages and their count (stage 2; None: no relay step),
    counted in every total and maximum, and as ``relay_ops`` and ``relay_bytes``; the bounds
    are the network stage's."""
    sent: dict[int, int] = defaultdict(int)
    got: dict[int, int] = defaultdict(int)
    send_peers: dict[int, set[int]] = defaultdict(set)
    recv_peers: dict[int, set[int]] = defaultdict(set)
    by_tier = [0] * len(names)
    network = 0
    for stage, found in enumerate((messages, () if relayed is None else relayed[0])):
        for s, r, nbytes in found:
            sent[s] += nbytes
            got[r] += nbytes
            send_peers[s].add(r)
            recv_peers[r].add(s)
            if labels:
                by_tier[tier_of(s, r, labels)] += nbytes
        if stage == 0:
            network = sum(sent.values())
    total = sum(sent.values())
    send_peer_bound, recv_peer_bound = peer_bounds(demands)
    relay_ops = 0 if relayed is None else relayed[1]
    extra = {} if relayed is None else {"relay_ops": relay_ops, "relay_bytes": total - network}
    return {
        "bytes_total": total,
        "ops": ops + relay_ops,
        "max_send_bytes": max(sent.values(), default=0),
        "max_send_bound": send_bound(src, network, needed),
        "max_recv_bytes": max(got.values(), default=0),
        "max_recv_bound": max(got.values(), default=0),
        "max_send_peers": max((len(p) for p in send_peers.values()), default=0),
        "max_send_peers_bound": send_peer_bound,
        "max_recv_peers": max((len(p) for p in recv_peers.values()), default=0),
        "max_recv_peers_bound": recv_peer_bound,
        "senders": len(sent),
        "receivers": len(got),
        "bytes_by_tier": dict(zip(names, by_tier, strict=True)),
        **extra,
    }
