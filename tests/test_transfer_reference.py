"""The planner against its earlier self: the same operations, in the same order, with the same
statistics, on seeded layouts without GTP (and, with GTP, against the reference cutting its
pieces as the planner does, by :func:`pieces`); the benchmark's ``first`` baseline against the
reference's; and the per-rank queries against filtering every operation.

The reference is the planner as it stood before classes, patterns and blocks (one tuple per
operation, one call per piece), kept here verbatim so that the faster one can be checked. It
cuts pieces by tensor-parallel index, so it places no GTP block.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings

from tests.test_transfer_laws import GTP, Case, cases
from tests.transfer_peers import PeerPlanner
from topology import RankMap, Topology
from topology._transfer.param_placement import param_placement, pieces
from topology._transfer.params import Param
from topology._transfer.plan import TransferOp, transfer

_Row = tuple[int, int, int, int, int, int, int, int]
NEW_STATS = ("max_send_peers_bound", "max_recv_peers_bound")
"""Statistics the reference lacks."""


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


class ReferencePlanner:
    """The planner as it stood before blocks and patterns: one tuple per op, one call per piece."""

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
        offset, src_base, dst_base = 0, 0, 0
        for n in param.part_sizes:
            ns, nd = n // source.split, n // target.split
            for b in range(target.split):
                for a in range(b * nd // ns, -(-(b + 1) * nd // ns)):
                    lo, hi = offset + max(a * ns, b * nd), offset + min((a + 1) * ns, (b + 1) * nd)
                    self.piece(
                        (
                            index,
                            lo,
                            hi,
                            src_base + lo - offset - a * ns,
                            dst_base + lo - offset - b * nd,
                        ),
                        param.row_bytes,
                        holders[a],
                        receivers[b],
                    )
            offset, src_base, dst_base = offset + n, src_base + ns, dst_base + nd

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
        for row in self.rows:  # bytes at 7: a 2-D block's ops add its rows at 8
            src, dst, nbytes = row[0], row[1], row[7]
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


def _shard_of(
    topology: Topology, param: Param, rank: int, num_layers: int
) -> tuple[list[tuple[int, int, int]], tuple[int, int] | None] | None:
    """``(start, stop, local start)`` of each range ``rank`` holds of ``param``, and its dim-0
    rows (None: all, but under GTP of a row-parallel weight), or None."""
    for shard in param_placement(topology, param, num_layers=num_layers).shards:
        if rank in shard.ranks:
            local, found = 0, []
            for lo, hi in shard.ranges:
                found.append((lo, hi, local))
                local += hi - lo
            return found, shard.rows
    return None


class _PiecesPlanner(ReferencePlanner):
    """The reference with its pieces cut by :func:`pieces` (GTP blocks included, 2-D ones of
    row-parallel weights too: their ops carry the block's rows), as the planner cuts them: the
    planner of the GTP branch before classes and patterns."""

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
        for lo, hi, a, b, src_at, dst_at, rows in pieces(source, target):
            if rows is None:
                row_bytes = param.row_bytes
            else:  # a 2-D block: only its rows' share of each index of the cut dim
                row_bytes = param.row_bytes // param.shape[0] * (rows[1] - rows[0])
            before = len(self.rows)
            self.piece((index, lo, hi, src_at, dst_at), row_bytes, holders[a], receivers[b])
            if rows is not None:
                self.rows[before:] = [(*row, rows) for row in self.rows[before:]]


def _reference(
    case: Case, policy: str = "balanced", kind: type[ReferencePlanner] = ReferencePlanner
) -> tuple[list[_Row], dict[str, Any]]:
    src, dst, params, layers, rank_map = case
    planner = kind(src, dst, rank_map, policy)
    for index, param in enumerate(params):
        planner.weight(index, param, layers)
    return planner.rows, planner.stats()


def _reference_held(case: Case, rank: int) -> list[TransferOp]:
    src, dst, params, layers, _ = case
    found = []
    for param in params:
        have = _shard_of(src, param, rank, layers)
        want = _shard_of(dst, param, rank, layers)
        if have is None or want is None:
            continue
        height = param.shape[0]
        (r0, r1), (q0, q1) = have[1] or (0, height), want[1] or (0, height)
        top, bottom = max(r0, q0), min(r1, q1)
        rows = None if (top, bottom) == (0, height) else (top, bottom, top - r0, top - q0)
        row_bytes = param.row_bytes if rows is None else param.row_bytes // height * (bottom - top)
        for lo, hi, src_at in have[0]:
            for a, z, dst_at in want[0]:
                start, stop = max(lo, a), min(hi, z)
                if start < stop and top < bottom:
                    nbytes = (stop - start) * row_bytes
                    op = TransferOp(
                        rank,
                        rank,
                        param,
                        start,
                        stop,
                        src_at + start - lo,
                        dst_at + start - a,
                        nbytes,
                        rows,
                    )
                    found.append(op)
    return found


def _without_new(stats: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in stats.items() if key not in NEW_STATS}


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(gtp=False))
def test_the_plan_equals_the_reference(case: Case) -> None:
    """Same operations in the same order and the same statistics as the reference planner."""
    src, dst, params, layers, rank_map = case
    plan = transfer(src, dst, params, num_layers=layers, allocation=rank_map)
    rows, stats = _reference(case)
    assert list(plan.rows) == rows
    assert len(plan) == len(rows)
    assert _without_new(plan.stats) == stats
    assert list(_without_new(plan.stats)) == list(stats), "the statistics' order changed"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(sources=GTP))
def test_the_plan_equals_the_reference_cutting_gtp_blocks(case: Case) -> None:
    """With GTP too: the same operations and statistics as the reference cutting by pieces."""
    src, dst, params, layers, rank_map = case
    plan = transfer(src, dst, params, num_layers=layers, allocation=rank_map)
    rows, stats = _reference(case, kind=_PiecesPlanner)
    assert list(plan.rows) == rows
    assert _without_new(plan.stats) == stats


@settings(max_examples=60, deadline=None)
@given(cases(gtp=False))
def test_the_first_baseline_equals_the_reference(case: Case) -> None:
    """The benchmark's ``first`` baseline (``tests/transfer_peers.py``) plans as the reference's."""
    src, dst, params, layers, rank_map = case
    planner = PeerPlanner(src, dst, rank_map, "first")
    for index, param in enumerate(params):
        planner.weight(index, param, layers)
    reference_rows, stats = _reference(case, "first")
    assert planner.rows == reference_rows
    assert _without_new(planner.stats()) == stats


@settings(max_examples=40, deadline=None)
@given(cases())
def test_per_rank_queries_equal_filtering_every_operation(case: Case) -> None:
    """sends, recvs and held give what filtering every operation (or every shard) gives."""
    src, dst, params, layers, rank_map = case
    plan = transfer(src, dst, params, num_layers=layers, allocation=rank_map)
    ops = plan.ops
    world = max(src.rank_offset + src.world_size, dst.rank_offset + dst.world_size)
    for rank in range(world):
        assert list(plan.sends(rank)) == [op for op in ops if op.src == rank]
        assert list(plan.recvs(rank)) == [op for op in ops if op.dst == rank]
        assert list(plan.held(rank)) == _reference_held(case, rank)
