"""The relay step (``transfer(..., relay=True)``): laws over random layouts and allocations
(every destination element arrives exactly once; a relay copies only what it received in stage
1, inside its NVLink domain, after every stage-1 operation; an element enters a domain holding
no copy of it through its NICs once at most; the statistics, bounds and predicted time agree
with the operations), then the command (``--relay``: text, JSON, ``--write-plans`` equal to
``for_rank``, refusals)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings

from tests.test_transfer_laws import Case, _cell_bytes, _cells, _dim0, _local_rows
from tests.test_transfer_time import _domains as domains_of
from tests.test_transfer_time import timed
from topology import (
    Allocation,
    Host,
    Topology,
    TopologyError,
    Transfer,
    TransferOp,
    transfer,
    transfer_rank,
    transfer_time,
    weights,
)
from topology._cli.main import main
from topology._transfer.relay import Relay

Drawn = tuple[Case, Allocation, float, float]


def _plans(drawn: Drawn) -> tuple[Transfer, Transfer]:
    """The case's plan without and with the relay step, on the drawn allocation."""
    (src, dst, params, layers, _), alloc = drawn[0], drawn[1]
    plain = transfer(src, dst, params, num_layers=layers, allocation=alloc)
    return plain, transfer(src, dst, params, num_layers=layers, allocation=alloc, relay=True)


def _block(op: TransferOp) -> set[tuple[int, int]]:
    dims = _dim0(op.param, op.rows[:2] if op.rows is not None else None)
    return {(d, g) for d in dims for g in range(op.start, op.stop)}


@settings(max_examples=25, deadline=None)
@given(timed())
def test_every_element_arrives_once_and_relays_copy_what_they_received(drawn: Drawn) -> None:
    """Held, received in stage 1 or copied in stage 2: each destination element exactly once,
    at both ends' local positions; a stage-2 sender sends from its destination shard what it
    received in stage 1, to a rank of its NVLink domain; stage 1 comes first; an element
    enters a domain that holds no copy of it once at most."""
    (src, dst, params, layers, _), alloc = drawn[0], drawn[1]
    _, plan = _plans(drawn)
    world = max(src.rank_offset + src.world_size, dst.rank_offset + dst.world_size)
    of, _ = domains_of(alloc, world)
    stages = [op.stage for op in plan.ops]
    assert stages == sorted(stages) and set(stages) <= {1, 2}
    for index, param in enumerate(params):
        have = _local_rows(src, param, layers)
        want = _local_rows(dst, param, layers)
        counts = {
            r: Counter(c for c in _cells(rows) if c in _cells(have.get(r, ([], []))))
            for r, rows in want.items()
        }
        got: dict[int, set[tuple[int, int]]] = defaultdict(set)
        entered: Counter[tuple[tuple[int, int], str]] = Counter()
        for op in plan.ops:
            if plan.params.index(op.param) != index:
                continue
            n, cells = op.stop - op.start, _block(op)
            dims = sorted({d for d, _ in cells})
            tops = op.rows[2:] if op.rows is not None else (0, 0)
            source = have[op.src] if op.stage == 1 else want[op.src]
            for (d0, g0), at, top in (
                (source, op.src_start, tops[0]),
                (want[op.dst], op.dst_start, tops[1]),
            ):
                assert g0[at : at + n] == list(range(op.start, op.stop))
                assert d0[top : top + len(dims)] == dims
            assert op.nbytes == len(cells) * _cell_bytes(param)
            if op.stage == 1:
                assert cells <= _cells(have[op.src])
                got[op.dst] |= cells
                home = of[op.dst]
                if of[op.src] != home:
                    near = [_cells(h) for r, h in have.items() if of[r] == home]
                    entered.update((c, home) for c in cells if not any(c in n for n in near))
            else:
                assert cells <= got[op.src], (param.name, op)
                assert of[op.src] == of[op.dst]
            counts[op.dst].update(cells)
        for r, rows in want.items():
            assert counts[r] == Counter(_cells(rows)), (param.name, r)
        assert max(entered.values(), default=0) <= 1, param.name


@settings(max_examples=25, deadline=None)
@given(timed())
def test_relay_statistics_bounds_and_time_agree_with_the_operations(drawn: Drawn) -> None:
    """Totals and relay counts add up from the operations; every maximum meets its bound; the
    predicted time is the network stage's busiest resource plus the relay copies' (op by op),
    never below the bound, which is the plan-free bound of the plan without relays."""
    (src, dst, _, _, _), alloc, nic, nvlink = drawn
    plain, plan = _plans(drawn)
    world = max(src.rank_offset + src.world_size, dst.rank_offset + dst.world_size)
    of, gpus = domains_of(alloc, world)
    s, ops = plan.stats, plan.ops
    relayed = [op for op in ops if op.stage == 2]
    assert s["ops"] == len(plan) == len(ops)
    assert s["bytes_total"] == sum(op.nbytes for op in ops) == plain.stats["bytes_total"]
    assert (s["relay_ops"], s["relay_bytes"]) == (len(relayed), sum(op.nbytes for op in relayed))
    assert s["max_send_bytes"] >= s["max_send_bound"]
    assert s["max_recv_bytes"] == s["max_recv_bound"]
    assert s["max_send_peers"] >= s["max_send_peers_bound"]
    assert s["max_recv_peers"] >= s["max_recv_peers_bound"]
    timed_plan = transfer_time(plan, alloc, nic_bandwidth=nic, nvlink_bandwidth=nvlink)
    fast = next((t.bandwidth for t in alloc.tiers if t.nvlink and t.bandwidth), nvlink)
    seconds = []
    for stage in (1, 2):
        load: dict[tuple[str, object], float] = defaultdict(float)
        for op in ops:
            if op.stage != stage:
                continue
            if of[op.src] == of[op.dst]:
                load["nvout", op.src] += op.nbytes / fast
                load["nvin", op.dst] += op.nbytes / fast
            else:
                load["out", of[op.src]] += op.nbytes / (gpus[of[op.src]] * nic)
                load["in", of[op.dst]] += op.nbytes / (gpus[of[op.dst]] * nic)
        seconds.append(max(load.values(), default=0.0))
    assert timed_plan.seconds == pytest.approx(sum(seconds), rel=1e-9)
    assert timed_plan.relay == pytest.approx(seconds[1], rel=1e-9)
    plain_time = transfer_time(plain, alloc, nic_bandwidth=nic, nvlink_bandwidth=nvlink)
    assert timed_plan.bound == plain_time.bound
    assert timed_plan.seconds >= timed_plan.bound * (1 - 1e-12)
    assert plain_time.relay is None and "relay_seconds" not in plain_time.to_dict()


@settings(max_examples=15, deadline=None)
@given(timed())
def test_a_relay_plan_without_shared_domains_is_the_plain_plan(drawn: Drawn) -> None:
    """On one-GPU hosts no domain has two receivers: the relay plan's operations are the plain
    plan's, and the plain plan's statistics have no relay keys."""
    src, dst, params, layers, _ = drawn[0]
    world = max(src.rank_offset + src.world_size, dst.rank_offset + dst.world_size)
    ones = Allocation([Host(f"n{i}", 1) for i in range(world)])
    plain = transfer(src, dst, params, num_layers=layers, allocation=ones)
    plan = transfer(src, dst, params, num_layers=layers, allocation=ones, relay=True)
    assert plan.ops == plain.ops
    assert plan.stats["relay_ops"] == 0 and "relay_ops" not in plain.stats
    assert plan.relay and not plain.relay


@settings(max_examples=20, deadline=None)
@given(timed())
def test_each_rank_alone_equals_its_part_of_the_relayed_plan(drawn: Drawn) -> None:
    """With the relay step, ``transfer_rank(r, relay=True)`` is ``for_rank(r)`` of the relayed
    plan: both stages, in plan order; over all ranks the sends are every operation."""
    (src, dst, params, layers, _), alloc = drawn[0], drawn[1]
    _, plan = _plans(drawn)
    world = max(src.rank_offset + src.world_size, dst.rank_offset + dst.world_size)
    sent: Counter[TransferOp] = Counter()
    for rank in range(world):
        alone = transfer_rank(
            src, dst, params, rank, num_layers=layers, allocation=alloc, relay=True
        )
        assert alone == plan.for_rank(rank)
        sent.update(alone.sends)
    assert sent == Counter(plan.ops)


APART = Topology(2, tp=2), Topology(2, dp=2, rank_offset=2)
HOSTS = Allocation([Host("a", 2), Host("b", 2)])
LAYOUTS = ["transfer", "--model", "llama-7b", "--from", "tp=2", "--to", "dp=2", "-w", "2"]
CLI = [*LAYOUTS, "--to-offset", "2", "--hosts", "a,b", "--gpus-per-host", "2", "--relay"]


def test_relay_goldens() -> None:
    """tp2 -> dp2 on the next host: each half enters host b once, then crosses over NVLink."""
    from topology import Param

    w = [Param("w", (8, 1000), sharding="column", layer=0)]
    plan = transfer(*APART, w, allocation=HOSTS, relay=True)
    assert [(op.src, op.dst, op.start, op.stop, op.stage) for op in plan.ops] == [
        (0, 2, 0, 4, 1),
        (1, 3, 4, 8, 1),
        (2, 3, 0, 4, 2),
        (3, 2, 4, 8, 2),
    ]
    t = transfer_time(plan, HOSTS, nic_bandwidth=1000.0, nvlink_bandwidth=10000.0)
    # 16,000 B through host b's 2 x 1,000 B/s: 8 s (the bound); then 8,000 B over NVLink: 0.8 s.
    assert (t.seconds, t.bound, t.relay) == (8.8, 8.0, 0.8)
    assert t.busiest == "NICs out of host a, then NVLink out of rank 2 (relay copies, 0.8 s)"
    assert plan.ops[2].to_dict()["stage"] == 2 and "stage" not in plan.ops[0].to_dict()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"relay": True}, "True needs an allocation"),
        ({"relay": 1, "allocation": HOSTS}, "relay must be True or False"),
    ],
)
def test_relay_refuses_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    from topology import Param

    w = [Param("w", (8, 8), sharding="column")]
    with pytest.raises(TopologyError, match=message):
        transfer(*APART, w, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match=message) as refused:
        transfer_rank(*APART, w, 0, **kwargs)  # type: ignore[arg-type]
    assert f"with allocation {kwargs.get('allocation')!r}"[:30] in str(refused.value)


def test_cli_relay_text_json_and_plans_agree_with_the_plan(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Text and JSON show the relay copies and their time; every ``--write-plans`` file holds
    ``for_rank``'s operations of the relayed plan, stage 2 marked."""
    plan = transfer(*APART, weights("llama-7b"), allocation=HOSTS, relay=True)
    assert main([*CLI, "--write-plans", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert f"relay copies {plan.stats['relay_ops']:,} operations" in text
    assert "(relay copies, " in text
    for rank in range(4):
        lines = (tmp_path / f"rank-{rank}.jsonl").read_text().splitlines()
        assert [json.loads(line) for line in lines] == [
            op.to_dict() for op in plan.for_rank(rank).ops
        ]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["stats"]["relay_ops"] == plan.stats["relay_ops"] > 0
    assert main([*CLI, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["ops"] == [op.to_dict() for op in plan.ops]
    assert document["time"]["relay_seconds"] > 0
    assert document["stats"]["relay_bytes"] == plan.stats["relay_bytes"]


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_cli_relay_rank_prints_its_part_of_the_relayed_plan(
    capsys: pytest.CaptureFixture[str], rank: int
) -> None:
    """``--relay --rank R --json``: R's operations of the relayed plan, stage 2 marked (a
    receiver relays to the other, and receives the other's relay copy)."""
    plan = transfer(*APART, weights("llama-7b"), allocation=HOSTS, relay=True)
    assert main([*CLI, "--rank", str(rank), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["ops"] == [op.to_dict() for op in plan.for_rank(rank).ops]
    stages = Counter(op.get("stage", 1) for op in document["ops"])
    assert stages[2] > 0 if rank >= 2 else stages == Counter({1: len(document["ops"])})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([*LAYOUTS, "--to-offset", "2", "--relay"], "--relay routes through the hosts"),
    ],
)
def test_cli_relay_refusals(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    """``--relay`` without an allocation: exit 2, one line."""
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_the_relay_choice_counts_the_bytes_each_receiver_copied_on() -> None:
    # Ranks 0-1 on one host, 2-4 on another; every piece goes from rank 0 to ranks 2, 3 and 4,
    # so the relay copies it to the two others (2 x its bytes). The receiver that has copied on
    # the fewest bytes relays the next piece, the first in need's order on a tie.
    relay = Relay([0, 0, 1, 1, 1])
    picks = [relay.route(0, (0,), (2, 3, 4), nbytes)[0] for nbytes in (10, 5, 5, 1, 1)]
    # 2 relays 10 (copies 20); 3 relays 5 (10); 4 relays 5 (10); 3 (10 < 20, first of 3 and 4)
    # relays 1 (12); 4 (10) relays 1 (12).
    assert picks == [(2,), (3,), (4,), (3,), (4,)]
    assert {r: n for r, n in relay.relayed.items() if n} == {2: 20, 3: 12, 4: 12}


def test_only_domains_with_two_receivers_are_relayed() -> None:
    # Ranks 2-3 share a host; rank 4 is alone on its host, rank 5 on the holder's host.
    relay = Relay([0, 0, 1, 1, 2, 0])
    served, copies = relay.route(7, (0,), (2, 3, 4, 5), 8)
    assert served == (2, 4, 5)
    assert copies == [(2, 3)]
    assert relay.groups == {7: [(2, 3)]}
    assert {r: n for r, n in relay.relayed.items() if n} == {2: 8}


def test_a_pair_names_its_relayed_domains_once() -> None:
    # The pair id stands for one (holders, receivers) pair: its domains are worked out once.
    calls = []

    class Counted(Relay):
        def _groups(self, holders: Sequence[int], need: Sequence[int]) -> list[tuple[int, ...]]:
            calls.append((tuple(holders), tuple(need)))
            return super()._groups(holders, need)

    relay = Counted([0, 0, 1, 1, 1])
    for _ in range(3):
        relay.route(0, (0,), (2, 3, 4), 10)
    relay.route(1, (2,), (3, 4), 10)
    assert calls == [((0,), (2, 3, 4)), ((2,), (3, 4))]
