"""How long a transfer plan takes on an allocation, and the least time any plan can take (private).

Model: the network entry of a rank is its *NVLink domain*: the domain of the allocation's
innermost NVLink tier (an NVL72 rack), else its host (see :func:`~.planner.levels`). A message
between two ranks of one NVLink domain runs on NVLink: it leaves the sender's GPU at
``nvlink`` bytes/s and enters the receiver's at ``nvlink`` (the NVLink tier's own ``bandwidth``
where it gives one). A message between domains leaves through the sender domain's NICs and
enters through the receiver domain's NICs: a domain of ``G`` GPUs has ``G * nic`` bytes/s each
way (``nic``: NIC bandwidth per GPU, a host's NICs shared by its GPUs). The switches above the
NICs are taken as non-blocking (a fat tree: outer tiers' ``bandwidth`` is not read); each link is
full duplex; latency is left out (a refit moves gigabytes).

Algorithm (predicted time): each resource's load is the bytes the plan's messages put through
it, and ``seconds = max(load / bandwidth)`` over every domain's NICs in and out and every GPU's
NVLink in and out: all messages run at once and the busiest resource finishes last. A plan with
a relay step (``transfer(..., relay=True)``) runs in two stages, one after the other (a relay
copies only what it holds, and the model does not pipeline a piece's receipt with its copy
on): ``seconds = stage 1 + stage 2``, each stage's time the formula above over its own
messages (stage 2, the relay copies, stays inside domains: NVLink only). Summing is safe (never
below what overlapping them would take) and costs little: the relay copies are the few weights
every GPU of a host holds whole, over NVLink, 9x the NICs' bandwidth per GPU.

Algorithm (lower bound, for *any* plan, relays included): a plan must give every receiver
each piece it lacks. For a piece of ``b`` bytes held by the ranks ``H`` (domains ``D(H)``) and
lacked by receivers in domains ``N``:

- each domain ``E`` in ``N - D(H)`` holds no copy, so the piece enters ``E`` through its NICs at
  least once (once suffices: an NVLink copy inside ``E`` can follow): ``in(E) += b``, and
  ``T >= in(E) / (G_E * nic)``;
- if ``N - D(H)`` is not empty, the piece leaves the domains ``D(H)`` at least once:
  ``out(D(H)) += b`` and ``T >= out(U) / (G_U * nic)`` for each such set ``U``, and for ``U``
  the domains of every source rank (counting the pieces some domain outside all of them needs);
- every byte a receiver lacks enters it over its NVLink or through its domain's NICs, so with
  ``L_E`` the bytes the receivers of ``E`` lack, ``T >= L_E / (G_E * nic + R_E * nvlink)``
  (``R_E`` receivers in ``E``).

``bound`` is the largest of these. The plan meets each: its bytes into ``E``'s NICs are at least
``in(E)`` (a relay receives the piece through them once, copies follow), the NIC loads of the
domains of ``U`` add up to at least ``out(U)`` and ``max(x_i / c_i) >= sum(x) / sum(c)``; a
receiver gets at most ``nvlink`` bytes/s over its NVLink in each stage, so the receipts of ``E``
take at least ``L_E / (G_E * nic + R_E * nvlink)`` in the two stages together; so
``seconds >= bound`` always.

>>> from topology import Allocation, Host, Param, Topology, transfer
>>> w = [Param("w", (8, 1000), sharding="column", layer=0)]
>>> plan = transfer(Topology(2, tp=2), Topology(4, dp=4, rank_offset=2), w)
>>> alloc = Allocation([Host("a", 2), Host("b", 2), Host("c", 2)])
>>> t = transfer_time(plan, alloc, nic_bandwidth=1000.0, nvlink_bandwidth=10000.0)
>>> t.seconds, t.bound, t.busiest
(32.0, 8.0, 'NICs out of host a')
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Any

import attrs

from .._args import as_float, show
from .._errors import TopologyError
from .._machine.allocation import Allocation
from .._machine.rankmap import RankMap
from .param_placement import param_placement, piece_ranks, placement_key
from .plan import Transfer, rank_map_of
from .planner import Pattern, block_bytes, cut_bounds, nvlink_level, rows_bytes

__all__ = ["TransferTime", "transfer_time"]


@attrs.frozen
class TransferTime:
    """A plan's predicted seconds on an allocation, the least seconds any plan needs, and the
    resources that set each (see :mod:`topology._transfer.timing` for the model)."""

    seconds: float
    bound: float
    busiest: str
    """The resource that finishes last under the plan (``NICs into host n3``)."""
    bound_by: str
    """The resource whose bytes give the bound."""
    nic_bandwidth: float
    """NIC bytes/s per GPU, each way."""
    nvlink_bandwidth: float
    """NVLink bytes/s per GPU, each way."""
    relay: float | None = None
    """The seconds of the relay copies (stage 2, included in ``seconds``); None: the plan has
    no relay step."""

    @property
    def ratio(self) -> float:
        """``seconds / bound`` (1.0 when nothing moves)."""
        return self.seconds / self.bound if self.bound else 1.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: the seconds, the bound, their ratio, the resources and the bandwidths."""
        return {
            "seconds": self.seconds,
            "bound_seconds": self.bound,
            "ratio": self.ratio,
            "busiest": self.busiest,
            "bound_by": self.bound_by,
            "nic_bandwidth_per_gpu": self.nic_bandwidth,
            "nvlink_bandwidth_per_gpu": self.nvlink_bandwidth,
            **({} if self.relay is None else {"relay_seconds": self.relay}),
        }


def _bandwidth(name: str, value: object) -> float:
    number = as_float(value)  # an int past a float stays an int, which is refused here
    if type(number) is not float or not 0 < number < math.inf:
        raise TopologyError(
            f"{name} must be a positive finite number of bytes/s per GPU, got {show(value)}; "
            "e.g. 50e9 for one 400 Gb/s NIC per GPU"
        )
    return number


@attrs.frozen
class _Domains:
    """Each rank's NVLink domain, each domain's name and GPUs, and the NVLink bandwidth."""

    of: Sequence[int]
    names: list[str]
    gpus: list[int]
    nvlink: float


def _domains(rank_map: RankMap, nvlink: float) -> _Domains:
    level = nvlink_level(rank_map)
    hosts = rank_map.hosts
    if level is None:
        per_host: Sequence[int] = range(len(hosts))
        names = [f"host {h.name}" for h in hosts]
    else:
        tier = rank_map.tiers[level - 1]
        per_host = rank_map.host_domain_ids(tier.name)
        known = rank_map.domain_names(tier.name)
        names = [f"{tier.name} {name}" for name in known]
        for host, label in zip(hosts, per_host, strict=True):
            if known[label] is None:
                names[label] = f"host {host.name}"
        nvlink = tier.bandwidth or nvlink
    gpus = [0] * len(names)
    for host, label in zip(hosts, per_host, strict=True):
        gpus[label] += host.gpus
    return _Domains([per_host[node] for node in rank_map.nodes], names, gpus, nvlink)


_Loads = tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]
"""The bytes through each domain's NICs (``("out"|"in", domain)``) and each GPU's NVLink
(``("out"|"in", rank)``)."""


def _loads(plan: Transfer, domain: Sequence[int], stage: int) -> _Loads:
    """The bytes the plan's operations of ``stage`` put through each resource."""
    per_pattern: dict[int, tuple[Pattern, list[int]]] = {}
    for block in plan.blocks:
        if block[5].stage != stage:
            continue
        _, lo, hi, _, _, pattern, _ = block
        row_bytes = block_bytes(block, plan.params[block[0]])
        entry = per_pattern.setdefault(id(pattern), (pattern, [0] * pattern.cuts))
        bounds = cut_bounds(lo, hi, pattern.cuts)
        for k in range(pattern.cuts):
            entry[1][k] += (bounds[k + 1] - bounds[k]) * row_bytes
    nic: dict[tuple[str, int], int] = defaultdict(int)
    nvlink: dict[tuple[str, int], int] = defaultdict(int)
    for pattern, weights in per_pattern.values():
        for s, r, k in pattern.units():
            if domain[s] == domain[r]:
                nvlink["out", s] += weights[k]
                nvlink["in", r] += weights[k]
            else:
                nic["out", domain[s]] += weights[k]
                nic["in", domain[r]] += weights[k]
    return nic, nvlink


_Piece = tuple[int, tuple[int, int, int, int] | None, frozenset[int], tuple[int, ...], bool]
"""(length along the cut dim, rows, holder domains, domains lacking a copy, lacked outside every
source domain) of one piece, per placement class; and the receivers lacking it per domain."""


def _pieces(
    plan: Transfer, domain: Sequence[int], sources: frozenset[int]
) -> list[tuple[int, list[tuple[_Piece, dict[int, int]]]]]:
    """Each weight's index and its pieces some receiver lacks (see :data:`_Piece`), the pieces
    of one placement class computed once."""
    classes: dict[Hashable, list[tuple[_Piece, dict[int, int]]]] = {}
    found = []
    splits = plan.src_pipeline_split, plan.dst_pipeline_split
    for index, param in enumerate(plan.params):
        sides = tuple(zip((plan.src, plan.dst), splits, strict=True))
        key = tuple(
            placement_key(t, param, num_layers=plan.num_layers, pipeline_split=split)
            for t, split in sides
        )
        if key not in classes:
            source, target = (
                param_placement(t, param, num_layers=plan.num_layers, pipeline_split=split)
                for t, split in sides
            )
            listed = classes[key] = []
            for lo, hi, _, _, holders, receivers, rows in piece_ranks(source, target):
                held = set(holders)
                lacking: dict[int, int] = defaultdict(int)
                for r in receivers:
                    if r not in held:
                        lacking[domain[r]] += 1
                if not lacking:
                    continue
                near = frozenset(domain[h] for h in holders)
                far = tuple(d for d in lacking if d not in near)
                beyond = any(d not in sources for d in far)
                listed.append(((hi - lo, rows, near, far, beyond), dict(lacking)))
        found.append((index, classes[key]))
    return found


def _bound(plan: Transfer, domains: _Domains, nic: float) -> tuple[float, str]:
    """The least seconds any plan needs and the resource that says so (see the module)."""
    domain = domains.of
    src = plan.src
    sources = frozenset(domain[r] for r in range(src.rank_offset, src.rank_offset + src.world_size))
    into: dict[int, int] = defaultdict(int)
    out_of: dict[frozenset[int], int] = defaultdict(int)
    beyond = 0
    lacked: dict[int, int] = defaultdict(int)
    for index, pieces in _pieces(plan, domain, sources):
        param = plan.params[index]
        for (length, rows, near, far, past), lacking in pieces:
            nbytes = length * rows_bytes(param, rows)
            for d in far:
                into[d] += nbytes
            if far:
                out_of[near] += nbytes
            if past:
                beyond += nbytes
            for d, count in lacking.items():
                lacked[d] += nbytes * count
    receivers: dict[int, int] = defaultdict(int)
    for r in range(plan.dst.rank_offset, plan.dst.rank_offset + plan.dst.world_size):
        receivers[domain[r]] += 1
    names, gpus = domains.names, domains.gpus
    candidates = [(0.0, "nothing to move")]
    candidates += [(b / (gpus[d] * nic), f"NICs into {names[d]}") for d, b in into.items()]
    for near, nbytes in out_of.items():
        shown = names[min(near)] + (f" and {len(near) - 1} more" if len(near) > 1 else "")
        candidates.append((nbytes / (sum(gpus[d] for d in near) * nic), f"NICs out of {shown}"))
    if beyond:
        total = sum(gpus[d] for d in sources) * nic
        candidates.append((beyond / total, "NICs out of every source domain"))
    for d, nbytes in lacked.items():
        capacity = gpus[d] * nic + receivers[d] * domains.nvlink
        candidates.append((nbytes / capacity, f"NICs and NVLink into {names[d]}"))
    return max(candidates, key=lambda c: c[0])


def transfer_time(
    plan: Transfer,
    allocation: Allocation | RankMap,
    *,
    nic_bandwidth: float,
    nvlink_bandwidth: float,
) -> TransferTime:
    """The seconds ``plan`` takes on ``allocation`` and the least any plan needs.

    Args:
        plan: a plan from :func:`topology.transfer`.
        allocation: where its ranks run (an :class:`Allocation` or its :class:`RankMap`).
        nic_bandwidth: a host's NIC bytes/s per GPU, each way (``topology.cost.H100_NODE``:
            ``inter.bandwidth``, 50e9: one 400 Gb/s NIC per GPU).
        nvlink_bandwidth: NVLink bytes/s per GPU, each way (``intra.bandwidth``; an NVLink
            tier's own ``bandwidth`` replaces it).

    Returns:
        A :class:`TransferTime`; ``seconds >= bound`` always.

    Raises:
        TopologyError: a wrong plan, allocation (too few ranks) or bandwidth.

    >>> from topology import Allocation, Host, Param, Topology, transfer
    >>> w = [Param("w", (8, 1000), sharding="column", layer=0)]
    >>> plan = transfer(Topology(2, tp=2), Topology(2, tp=2, rank_offset=2), w)
    >>> t = transfer_time(plan, Allocation([Host("a", 2), Host("b", 2)]),
    ...                   nic_bandwidth=1000.0, nvlink_bandwidth=10000.0)
    >>> t.seconds, t.bound, t.ratio
    (8.0, 8.0, 1.0)
    """
    if not isinstance(plan, Transfer):
        raise TopologyError(
            f"plan must be a Transfer, got {show(plan)} ({type(plan).__name__}); "
            "make one with topology.transfer(...)"
        )
    nic = _bandwidth("nic_bandwidth", nic_bandwidth)
    nvlink = _bandwidth("nvlink_bandwidth", nvlink_bandwidth)
    world = max(t.rank_offset + t.world_size for t in (plan.src, plan.dst))
    rank_map = rank_map_of(allocation, world)
    if rank_map is None:
        raise TopologyError(
            "allocation must be an Allocation or a RankMap, got None; time needs the hosts"
        )
    domains = _domains(rank_map, nvlink)
    seconds, busiest = _busiest(_loads(plan, domains.of, 1), domains, nic)
    relay = None
    if plan.relay:
        relay, copying = _busiest(_loads(plan, domains.of, 2), domains, nic)
        if relay:
            seconds += relay
            busiest += f", then {copying} (relay copies, {relay:.3g} s)"
    bound, bound_by = _bound(plan, domains, nic)
    return TransferTime(seconds, bound, busiest, bound_by, nic, domains.nvlink, relay)


def _busiest(found: _Loads, domains: _Domains, nic: float) -> tuple[float, str]:
    """The seconds of the busiest resource under ``found`` and its name."""
    nic_loads, nvlink_loads = found
    loads = [(0.0, "nothing to move")]
    for (way, d), nbytes in nic_loads.items():
        where = "into" if way == "in" else "out of"
        loads.append((nbytes / (domains.gpus[d] * nic), f"NICs {where} {domains.names[d]}"))
    for (way, r), nbytes in nvlink_loads.items():
        where = "into" if way == "in" else "out of"
        loads.append((nbytes / domains.nvlink, f"NVLink {where} rank {r}"))
    return max(loads, key=lambda c: c[0])
