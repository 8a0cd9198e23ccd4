"""The predicted transfer time and its lower bound: laws (the plan never beats the bound; the
loads equal those of the plan's operations; the bound equals an element-by-element reference),
then goldens worked by hand, then the command's text and JSON."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_transfer_laws import Case, _cell_bytes, _cells, _local_rows, cases
from topology import (
    Allocation,
    Host,
    Param,
    Tier,
    Topology,
    TopologyError,
    Transfer,
    transfer,
    transfer_time,
)
from topology._cli.main import main

NIC, NVLINK = 1000.0, 10000.0


@st.composite
def timed(draw: st.DrawFn) -> tuple[Case, Allocation, float, float]:
    """A law case, an allocation of its ranks (hosts of 1, 2 or 4 GPUs, sometimes NVLink racks
    of two hosts, sometimes a rack with its own bandwidth) and two bandwidths."""
    case = draw(cases())
    src, dst = case[0], case[1]
    world = max(src.rank_offset + src.world_size, dst.rank_offset + dst.world_size)
    gpus = draw(st.sampled_from((1, 2, 4)))
    racks = draw(
        st.sampled_from(((), (Tier("rack", nvlink=True),), (Tier("rack", 7e3, nvlink=True),)))
    )
    hosts = [Host(f"n{i}", gpus, (f"r{i // 2}",) * len(racks)) for i in range(-(-world // gpus))]
    nic = draw(st.sampled_from((1e3, 5e3, 2.5e4)))
    nvlink = draw(st.sampled_from((1e3, 9e3, 4.5e4)))
    return case, Allocation(hosts, racks), nic, nvlink


def _domains(alloc: Allocation, world: int) -> tuple[list[str], dict[str, int]]:
    """Each rank's NVLink domain name (its rack, else its host) and each domain's GPUs."""
    rank_map = alloc.rank_map(world)
    nvlink = any(t.nvlink for t in alloc.tiers)
    of = [str(loc.domains[0]) if nvlink else loc.host for loc in rank_map]
    gpus: dict[str, int] = defaultdict(int)
    for host in rank_map.hosts:
        gpus[str(host.domains[0]) if nvlink else host.name] += host.gpus
    return of, gpus


def _reference(
    case: Case, plan: Transfer, alloc: Allocation, nic: float, nvlink: float
) -> tuple[float, float]:
    """Predicted seconds from the plan's every operation, and the bound from every element."""
    src, dst, params, layers, _ = case
    world = max(src.rank_offset + src.world_size, dst.rank_offset + dst.world_size)
    of, gpus = _domains(alloc, world)
    fast = next((t.bandwidth for t in alloc.tiers if t.nvlink and t.bandwidth), nvlink)
    load: dict[tuple[str, object], float] = defaultdict(float)
    for s, r, *_, nbytes in (row[:8] for row in plan.rows):
        if of[s] == of[r]:
            load["nvout", s] += nbytes / fast
            load["nvin", r] += nbytes / fast
        else:
            load["out", of[s]] += nbytes / (gpus[of[s]] * nic)
            load["in", of[r]] += nbytes / (gpus[of[r]] * nic)
    into: dict[str, int] = defaultdict(int)
    out: dict[frozenset[str], int] = defaultdict(int)
    lacked: dict[str, int] = defaultdict(int)
    beyond = 0
    sources = {of[r] for r in range(src.rank_offset, src.rank_offset + src.world_size)}
    for param in params:
        have, want = _local_rows(src, param, layers), _local_rows(dst, param, layers)
        held = {r: _cells(h) for r, h in have.items()}
        size = _cell_bytes(param)
        cells = set().union(*(_cells(w) for w in want.values()))
        for cell in cells:
            holders = [r for r, c in held.items() if cell in c]
            lacking = [r for r, w in want.items() if cell in _cells(w) and r not in holders]
            if not lacking:
                continue
            near = frozenset(of[h] for h in holders)
            far = {of[r] for r in lacking} - near
            for d in far:
                into[d] += size
            if far:
                out[near] += size
            if far - sources:
                beyond += size
            for r in lacking:
                lacked[of[r]] += size
    receivers: dict[str, int] = defaultdict(int)
    for r in range(dst.rank_offset, dst.rank_offset + dst.world_size):
        receivers[of[r]] += 1
    bound = [0.0, beyond / (sum(gpus[d] for d in sources) * nic)]
    bound += [b / (gpus[d] * nic) for d, b in into.items()]
    bound += [b / (sum(gpus[d] for d in u) * nic) for u, b in out.items()]
    bound += [b / (gpus[d] * nic + receivers[d] * fast) for d, b in lacked.items()]
    return max(load.values(), default=0.0), max(bound)


@settings(max_examples=25)
@given(timed())
def test_the_plan_never_beats_the_bound(drawn: tuple[Case, Allocation, float, float]) -> None:
    """Predicted seconds >= the bound, and both equal the op-by-op and element-by-element
    references; nothing moved is zero seconds."""
    case, alloc, nic, nvlink = drawn
    src, dst, params, layers, _ = case
    plan = transfer(src, dst, params, num_layers=layers, allocation=alloc)
    found = transfer_time(plan, alloc, nic_bandwidth=nic, nvlink_bandwidth=nvlink)
    assert found.seconds >= found.bound * (1 - 1e-12)
    assert found.ratio >= 1 - 1e-12
    seconds, bound = _reference(case, plan, alloc, nic, nvlink)
    assert found.seconds == pytest.approx(seconds, rel=1e-9)
    assert found.bound == pytest.approx(bound, rel=1e-9)
    assert (found.seconds == 0) == (plan.stats["bytes_total"] == 0)


W = [Param("w", (8, 1000), sharding="column", layer=0)]
"""Two rows of 2,000 bytes per tp shard: 16,000 bytes whole."""
APART = Topology(2, tp=2), Topology(4, dp=4, rank_offset=2)
HOSTS = Allocation([Host("a", 2), Host("b", 2), Host("c", 2)])
RACK = Allocation([Host(n, 2, ("r0",)) for n in "abc"], [Tier("rack", nvlink=True)])

GOLDENS = [
    # Host a sends 8,000 B to each of 4 receivers per GPU: 64,000 B through 2 x 1,000 B/s: 32 s.
    # Any plan: the 16,000 B leave a once (8 s), enter b and c once each (8 s).
    (APART, HOSTS, 32.0, "NICs out of host a", 8.0),
    # One NVLink rack: rank 0 sends 4 x 8,000 B over NVLink at 10,000 B/s: 3.2 s. Any plan: the
    # 4 receivers lack 64,000 B, arriving over their NVLink (4 x 10,000) or the rack's NICs
    # (6 x 1,000): 64,000 / 46,000 s.
    (APART, RACK, 3.2, "NVLink out of rank 0", 64000 / 46000),
    # tp2 -> tp2 apart: each GPU of b gets its 8,000 B; b's NICs take 16,000 B in 8 s, as any plan.
    ((Topology(2, tp=2), Topology(2, tp=2, rank_offset=2)), HOSTS, 8.0, "NICs out of host a", 8.0),
    # Colocated and equal: nothing moves.
    ((Topology(2, tp=2), Topology(2, tp=2)), HOSTS, 0.0, "nothing to move", 0.0),
]


@pytest.mark.parametrize(("layouts", "alloc", "seconds", "busiest", "bound"), GOLDENS)
def test_time_goldens(
    layouts: tuple[Topology, Topology],
    alloc: Allocation,
    seconds: float,
    busiest: str,
    bound: float,
) -> None:
    """Tiny cases worked by hand (see each comment)."""
    plan = transfer(*layouts, W)
    found = transfer_time(plan, alloc, nic_bandwidth=NIC, nvlink_bandwidth=NVLINK)
    assert found.seconds == pytest.approx(seconds) and found.busiest == busiest
    assert found.bound == pytest.approx(bound)


def test_an_nvlink_tier_bandwidth_replaces_the_gpu_figure() -> None:
    """A rack tier with its own bandwidth prices NVLink at it (3.2 s at 10,000 -> 6.4 at 5,000)."""
    alloc = Allocation([Host(n, 2, ("r0",)) for n in "abc"], [Tier("rack", 5e3, nvlink=True)])
    found = transfer_time(transfer(*APART, W), alloc, nic_bandwidth=NIC, nvlink_bandwidth=NVLINK)
    assert found.seconds == pytest.approx(6.4) and found.nvlink_bandwidth == 5e3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"plan": "x"}, r"plan must be a Transfer, got 'x' \(str\)"),
        ({"allocation": None}, "allocation must be an Allocation or a RankMap, got None"),
        ({"allocation": 4}, "allocation must be an Allocation, a RankMap or None, got 4"),
        (
            {"allocation": Allocation([Host("a", 4)]).rank_map(4)},
            "allocation places 4 ranks but the layouts use ranks up to 5",
        ),
        ({"nic_bandwidth": 0}, "nic_bandwidth must be a positive finite number"),
        ({"nvlink_bandwidth": float("nan")}, "nvlink_bandwidth must be a positive finite"),
        ({"nic_bandwidth": "50e9"}, r"nic_bandwidth must be .* got '50e9'"),
        ({"nic_bandwidth": True}, r"nic_bandwidth must be .* got True"),
        ({"nic_bandwidth": 10**400}, r"nic_bandwidth must be .* got <int of about"),
    ],
)
def test_transfer_time_refuses_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    """Each wrong argument raises a TopologyError naming it."""
    given: dict[str, object] = {
        "plan": transfer(*APART, W),
        "allocation": HOSTS,
        "nic_bandwidth": NIC,
        "nvlink_bandwidth": NVLINK,
    }
    given.update(kwargs)
    plan, alloc = given.pop("plan"), given.pop("allocation")
    with pytest.raises(TopologyError, match=message):
        transfer_time(plan, alloc, **given)  # type: ignore[arg-type]


ARGV: Sequence[str] = (
    "transfer",
    "--model",
    "llama-7b",
    "--from",
    "tp=8",
    "--to",
    "tp=4,dp=2",
    "-w",
    "8",
    "--to-offset",
    "8",
    "--hosts",
    "n[0-3]",
    "--gpus-per-host",
    "4",
)


def test_cli_prints_the_time_with_an_allocation(capsys: pytest.CaptureFixture[str]) -> None:
    """With hosts, the text gives the predicted seconds, the bound and the ratio."""
    assert main([*ARGV]) == 0
    out = capsys.readouterr().out
    assert "predicted time" in out and "lower bound" in out and "NICs" in out


def test_cli_json_gives_the_time(capsys: pytest.CaptureFixture[str]) -> None:
    """``--json`` holds ``time`` with seconds >= bound_seconds, computed from the h100 row."""
    assert main([*ARGV, "--json", "--summary"]) == 0
    time = json.loads(capsys.readouterr().out)["time"]
    assert time["seconds"] >= time["bound_seconds"] > 0
    assert time["nic_bandwidth_per_gpu"] == 50e9 and time["hardware"] == "h100"


def test_cli_json_without_an_allocation_has_no_time(capsys: pytest.CaptureFixture[str]) -> None:
    """No hosts, no time: ``time`` is null."""
    argv = ["transfer", "--model", "llama-7b", "--from", "tp=2", "--to", "dp=2", "-w", "2"]
    assert main([*argv, "--json", "--summary"]) == 0
    assert json.loads(capsys.readouterr().out)["time"] is None
