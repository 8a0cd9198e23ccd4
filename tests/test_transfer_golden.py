"""Golden tables and error messages of weight placements and transfer plans."""

from __future__ import annotations

import pytest

from topology import (
    Allocation,
    Host,
    Param,
    Tier,
    Topology,
    TopologyError,
    param_placement,
    transfer,
    weights,
)
from topology._cli.main import main
from topology._transfer.param_placement import layer_chunks

# Each row: layout, weight, num_layers -> (shard index, stage, chunk, ranks, ranges) per shard.
# Invariant: the ranks of one stage's shards partition the stage; ranges tile the cut dim.
PLACEMENTS = [
    (
        Topology(8, tp=2, pp=2),
        Param("fc1", (8, 4), sharding="column", parts=(4, 4), layer=1),
        2,
        [(0, 1, 0, (4, 6), ((0, 2), (4, 6))), (1, 1, 0, (5, 7), ((2, 4), (6, 8)))],
    ),
    (
        Topology(8, tp=2, pp=2),
        Param("proj", (4, 8), sharding="row", layer=0),
        2,
        [(0, 0, 0, (0, 2), ((0, 4),)), (1, 0, 0, (1, 3), ((4, 8),))],
    ),
    (
        Topology(4, tp=2, pp=2),
        Param("embed", (6, 4), sharding="vocab", position="tied"),
        2,
        [
            (0, 0, 0, (0,), ((0, 3),)),
            (1, 0, 0, (1,), ((3, 6),)),
            (0, 1, 0, (2,), ((0, 3),)),
            (1, 1, 0, (3,), ((3, 6),)),
        ],
    ),
    (
        Topology(8, pp=2, vpp=2),
        Param("norm", (4,), layer=3),
        4,
        [(0, 1, 1, (4, 5, 6, 7), ((0, 4),))],
    ),
    (
        Topology(8, tp=2, ep=4, etp=1),
        Param("e5", (4, 2), sharding="expert-column", layer=0, expert=5, num_experts=8),
        1,
        [(0, 0, 0, (2, 6), ((0, 4),))],
    ),
    (  # an expert's weight etp does not cut (its linear_fc2 bias): whole on its ep coordinate
        Topology(8, tp=2, ep=2, etp=2),
        Param("e1.bias", (4,), sharding="expert-replicated", layer=0, expert=1, num_experts=2),
        1,
        [(0, 0, 0, (2, 3, 6, 7), ((0, 4),))],
    ),
    # Megatron's GTP (generalized_tensor_parallelism.py, gtp_remat_shard_dim0 and
    # _gtp_slice_one_param; docs/api-guide/core/generalized_tensor_parallel.md 1.3-1.4): dim 0 of
    # each rank's tp shard is padded at the tail to a multiple of 16 * G and cut into G blocks.
    (
        Topology(4, tp=2, gtp=2),
        Param("qkv", (64, 8), sharding="column", layer=0),
        1,
        [
            (0, 0, 0, (0,), ((0, 16),)),
            (1, 0, 0, (2,), ((16, 32),)),
            (2, 0, 0, (1,), ((32, 48),)),
            (3, 0, 0, (3,), ((48, 64),)),
        ],
    ),
    (  # tp shard [gate_a; up_a]: gtp rank 0 holds gate_a, rank 1 up_a
        Topology(4, tp=2, gtp=2),
        Param("fc1", (64, 4), sharding="column", parts=(32, 32), layer=0),
        1,
        [
            (0, 0, 0, (0,), ((0, 16),)),
            (1, 0, 0, (2,), ((32, 48),)),
            (2, 0, 0, (1,), ((16, 32),)),
            (3, 0, 0, (3,), ((48, 64),)),
        ],
    ),
    (  # 40 rows padded to 64: blocks of 32, the second 8 rows and 24 of padding
        Topology(2, gtp=2),
        Param("out", (40, 8), sharding="vocab", position="last"),
        1,
        [(0, 0, 0, (0,), ((0, 32),)), (1, 0, 0, (1,), ((32, 40),))],
    ),
    (  # 8 rows padded to 32: gtp rank 1 holds only padding
        Topology(2, gtp=2),
        Param("w", (8, 4), sharding="column", layer=0),
        1,
        [(0, 0, 0, (0,), ((0, 8),)), (1, 0, 0, (1,), ())],
    ),
    (  # a bias stays whole over gtp: cut by tp only, held by both gtp ranks
        Topology(4, tp=2, gtp=2),
        Param("bias", (8,), sharding="column", layer=0),
        1,
        [(0, 0, 0, (0, 2), ((0, 4),)), (1, 0, 0, (1, 3), ((4, 8),))],
    ),
    (  # an expert under egtp 2 (etp1, ep2, egtp2, edp2): expert 1 lives on ep rank 1
        Topology(8, tp=2, ep=2, etp=1, egtp=2),
        Param("e1", (64, 4), sharding="expert-column", layer=0, expert=1, num_experts=2),
        1,
        [(0, 0, 0, (1, 5), ((0, 32),)), (1, 0, 0, (3, 7), ((32, 64),))],
    ),
    (
        Topology(8, tp=2, ep=2, etp=2),
        Param("e1", (2, 4), sharding="expert-row", layer=0, expert=1, num_experts=2),
        1,
        [(0, 0, 0, (2, 6), ((0, 2),)), (1, 0, 0, (3, 7), ((2, 4),))],
    ),
]


@pytest.mark.parametrize(("topo", "param", "layers", "expected"), PLACEMENTS)
def test_placements_golden(
    topo: Topology, param: Param, layers: int, expected: list[tuple[object, ...]]
) -> None:
    """Shards, stages, chunks, holders and ranges of each weight match the table."""
    shards = param_placement(topo, param, num_layers=layers).shards
    assert [(s.index, s.stage, s.chunk, s.ranks, s.ranges) for s in shards] == expected


def test_dtensor_pairs() -> None:
    """Mesh axes and placements as DTensor spells them; fused parts have none."""
    topo = Topology(16, tp=2, cp=2, pp=2)
    row = param_placement(topo, Param("w", (4, 8), sharding="row", layer=0), num_layers=2)
    assert row.dtensor == (("dp", "cp", "tp"), ("Replicate()", "Replicate()", "Shard(1)"))
    norm = param_placement(topo, Param("n", (4,), layer=0), num_layers=2)
    assert norm.dtensor == (("dp", "cp", "tp"), ("Replicate()",) * 3)
    fused = Param("fc1", (8, 4), sharding="column", parts=(4, 4), layer=0)
    assert param_placement(topo, fused, num_layers=2).dtensor is None
    expert = Param("e", (4, 2), sharding="expert-column", layer=0, expert=0, num_experts=2)
    moe = param_placement(Topology(16, tp=2, ep=2, etp=1), expert, num_layers=1)
    assert moe.dtensor == (("edp", "etp"), ("Replicate()", "Shard(0)"))


def test_layer_chunks_split_unevenly_longest_first() -> None:
    """61 layers on pp 16: stages 0..12 hold 4 layers, 13..15 hold 3 (numpy's array_split)."""
    chunks = layer_chunks(Topology(16, pp=16), 61)
    counts = [sum(stage == s for stage, _ in chunks) for s in range(16)]
    assert counts == [4] * 13 + [3] * 3


def test_identical_colocated_layouts_move_nothing() -> None:
    """Every rank already holds its destination shards: no operation, no byte."""
    topo = Topology(8, tp=2, pp=2)
    plan = transfer(topo, topo, weights("llama-7b"))
    assert len(plan) == 0 and plan.stats["bytes_total"] == 0


def test_gtp_blocks_move_to_the_tp_shards_they_are() -> None:
    """tp2 x gtp2 -> tp4 on the same 4 ranks: the two GTP blocks held off their tp4 rank swap."""
    weight = [Param("qkv", (64, 8), sharding="column", layer=0)]
    plan = transfer(Topology(4, tp=2, gtp=2), Topology(4, tp=4), weight)
    assert [(op.src, op.dst, op.start, op.stop, op.src_start) for op in plan.ops] == [
        (2, 1, 16, 32, 0),
        (1, 2, 32, 48, 0),
    ]
    assert [(op.start, op.stop) for op in plan.held(0) + plan.held(3)] == [(0, 16), (48, 64)]


# A row-parallel weight under GTP (Megatron's _gtp_pre_init with out_split_size 1: dim 0 of the
# tp shard is all 40 rows, padded to 64 for gtp 2 (blocks of 32, the second 8 rows), to 64 for
# gtp 4 (blocks of 16: 16, 16, 8, then padding only)): (index, ranks, ranges, rows).
ROW_GTP = [
    (
        Topology(4, tp=2, gtp=2),
        [
            (0, (0,), ((0, 4),), (0, 32)),
            (1, (2,), ((0, 4),), (32, 40)),
            (2, (1,), ((4, 8),), (0, 32)),
            (3, (3,), ((4, 8),), (32, 40)),
        ],
    ),
    (
        Topology(8, tp=2, gtp=4),
        [
            (0, (0,), ((0, 4),), (0, 16)),
            (1, (2,), ((0, 4),), (16, 32)),
            (2, (4,), ((0, 4),), (32, 40)),
            (3, (6,), (), None),
            (4, (1,), ((4, 8),), (0, 16)),
            (5, (3,), ((4, 8),), (16, 32)),
            (6, (5,), ((4, 8),), (32, 40)),
            (7, (7,), (), None),
        ],
    ),
]


@pytest.mark.parametrize(("topo", "expected"), ROW_GTP)
def test_row_parallel_gtp_blocks_golden(topo: Topology, expected: list[object]) -> None:
    """Each gtp rank holds its tp shard's columns times its block of rows (padding: nothing)."""
    proj = Param("proj", (40, 8), sharding="row", layer=0)
    shards = param_placement(topo, proj, num_layers=1).shards
    assert [(s.index, s.ranks, s.ranges, s.rows) for s in shards] == expected


def test_expert_row_gtp_blocks_golden() -> None:
    """egtp cuts dim 0 of an expert-row weight's etp shard: expert 1 on ep rank 1."""
    e1 = Param("e1", (40, 4), sharding="expert-row", layer=0, expert=1, num_experts=2)
    shards = param_placement(Topology(8, tp=2, ep=2, etp=1, egtp=2), e1, num_layers=1).shards
    assert [(s.ranks, s.ranges, s.rows) for s in shards] == [
        ((1, 5), ((0, 4),), (0, 32)),
        ((3, 7), ((0, 4),), (32, 40)),
    ]


ROW_MOVES = [
    (  # tp2 x gtp2 -> tp4: each tp4 rank takes its 2 columns from a top and a bottom block
        Topology(4, tp=4, rank_offset=4),
        [
            (0, 4, 0, 2, 0, 0, (0, 32, 0, 0), 128),
            (2, 4, 0, 2, 0, 0, (32, 40, 0, 32), 32),
            (0, 5, 2, 4, 2, 0, (0, 32, 0, 0), 128),
            (2, 5, 2, 4, 2, 0, (32, 40, 0, 32), 32),
            (1, 6, 4, 6, 0, 0, (0, 32, 0, 0), 128),
            (3, 6, 4, 6, 0, 0, (32, 40, 0, 32), 32),
            (1, 7, 6, 8, 2, 0, (0, 32, 0, 0), 128),
            (3, 7, 6, 8, 2, 0, (32, 40, 0, 32), 32),
        ],
    ),
    (  # tp2 x gtp2 -> tp2 x gtp4: blocks of 16 rows, the top block of 32 split in two
        Topology(8, tp=2, gtp=4, rank_offset=4),
        [
            (0, 4, 0, 4, 0, 0, (0, 16, 0, 0), 128),
            (0, 6, 0, 4, 0, 0, (16, 32, 16, 0), 128),
            (2, 8, 0, 4, 0, 0, (32, 40, 0, 0), 64),
            (1, 5, 4, 8, 0, 0, (0, 16, 0, 0), 128),
            (1, 7, 4, 8, 0, 0, (16, 32, 16, 0), 128),
            (3, 9, 4, 8, 0, 0, (32, 40, 0, 0), 64),
        ],
    ),
]


@pytest.mark.parametrize(("dst", "expected"), ROW_MOVES)
def test_row_parallel_gtp_moves_golden(dst: Topology, expected: list[object]) -> None:
    """Ops of a tp2 x gtp2 row-parallel weight: columns, local columns, rows, bytes."""
    proj = [Param("proj", (40, 8), sharding="row", layer=0)]
    plan = transfer(Topology(4, tp=2, gtp=2), dst, proj)
    found = [
        (o.src, o.dst, o.start, o.stop, o.src_start, o.dst_start, o.rows, o.nbytes)
        for o in plan.ops
    ]
    assert found == expected
    assert plan.stats["bytes_total"] == 40 * 8 * 2
    op = plan.ops[1]  # the bottom block: 8 rows (tp4), or rows 16..32 of the top block (gtp4)
    assert op.rows is not None
    (top, bottom, at, to), n = op.rows, op.stop - op.start
    height = bottom - top
    assert op.src_slice == (slice(at, at + height), slice(op.src_start, op.src_start + n))
    assert op.dst_slice == (slice(to, to + height), slice(op.dst_start, op.dst_start + n))
    assert op.global_slice == (slice(top, bottom), slice(op.start, op.stop))
    keys = ("start", "stop", "src_start", "dst_start")
    assert op.to_dict()["rows"] == dict(zip(keys, op.rows, strict=True))
    plain = transfer(Topology(2, tp=2), Topology(4, tp=4, rank_offset=2), proj)
    assert "rows" not in plain.ops[0].to_dict() and plain.ops[0].rows is None


def test_a_source_in_the_receivers_rack_is_preferred() -> None:
    """With replicas in each rack, no byte crosses a rack (some cross hosts inside it)."""
    racks = Allocation(
        [Host(f"n{i}", 4, (f"r{i // 2}",)) for i in range(4)], [Tier("rack", nvlink=True)]
    )
    src = Topology(16, tp=2, dp=8)  # four replicas in each rack of 8 ranks
    dst = Topology(16, tp=8, dp=2)  # colocated
    params = weights("llama-7b")[:20]
    near = transfer(src, dst, params, allocation=racks.rank_map(16))
    assert near.stats["bytes_by_tier"]["world"] == 0
    far = transfer(src, dst, params)
    assert far.stats["bytes_total"] == near.stats["bytes_total"]
    assert near.stats["bytes_by_tier"]["rack"] > 0


def test_balance_on_a_moe_layout_is_within_5_percent_of_the_bound() -> None:
    """Mixtral from tp2 x ep4 (etp1) x pp2 to tp4 x dp4: max send within 1.05x of the bound."""
    stats = transfer(
        Topology(16, tp=2, ep=4, etp=1, pp=2), Topology(16, tp=4), weights("mixtral-8x7b")
    ).stats
    assert stats["max_send_bound"] <= stats["max_send_bytes"] <= 1.05 * stats["max_send_bound"]


ERRORS = [
    (lambda: Param("w", (8, 4), sharding="column", parts=(4, 3)), r"parts \(4, 3\) must be ints"),
    (lambda: Param("w", (8,), sharding="row"), r"cuts dim 1 but shape \(8,\) has 1 dims"),
    (lambda: Param("w", (8,), sharding="diagonal"), "Param.sharding must be one of"),
    (lambda: Param("w", (8, 2), sharding="expert-row", layer=0), "takes expert and num_experts"),
    (lambda: Param("w", (8,), expert=1, num_experts=2), "takes expert and num_experts neither"),
    (
        lambda: Param("w", (8, 2), sharding="expert-row", layer=0, expert=2, num_experts=2),
        r"expert 2 must lie in range\(num_experts=2\)",
    ),
    (
        lambda: param_placement(
            Topology(3, tp=3), Param("w", (8, 2), sharding="column"), num_layers=1
        ),
        r"part of 8 along dim 0 is not divisible by tp\(3\)",
    ),
    (
        lambda: param_placement(Topology(2), Param("w", (8,), layer=4), num_layers=4),
        r"layer 4 is outside the model's 4 layers",
    ),
    (
        lambda: param_placement(Topology(8, pp=4, vpp=2), Param("w", (8,), layer=1), num_layers=6),
        r"num_layers 6 is fewer than pp\(4\) \* vpp\(2\) = 8",
    ),
    (
        lambda: param_placement(
            Topology(4, ep=4, etp=1),
            Param("e", (2, 2), sharding="expert-row", layer=0, expert=0, num_experts=2),
            num_layers=1,
        ),
        r"num_experts 2 is not divisible by ep\(4\)",
    ),
    (lambda: transfer(Topology(2), Topology(2), []), "params must be a non-empty sequence"),
    (lambda: transfer(Topology(2), "tp=2", [Param("w", (2,))]), "dst must be a Topology"),  # type: ignore[arg-type]
    (
        lambda: transfer(Topology(2), Topology(2), [Param("w", (2,))], allocation=8),  # type: ignore[arg-type]
        "allocation must be an Allocation, a RankMap or None",
    ),
    (
        lambda: transfer(
            Topology(4),
            Topology(4),
            [Param("w", (2,))],
            allocation=Allocation([Host("a", 2)]).rank_map(2),
        ),
        "allocation places 2 ranks but the layouts use ranks up to 3",
    ),
    (lambda: weights("gpt-5"), "unknown model preset 'gpt-5' for a transfer"),
]


@pytest.mark.parametrize(("call", "message"), ERRORS)
def test_errors_name_the_value_and_the_fix(call: object, message: str) -> None:
    """Each invalid input raises TopologyError with its pinned message."""
    with pytest.raises(TopologyError, match=message):
        call()  # type: ignore[operator]


def test_cli_prints_the_balance_and_the_tiers(capsys: pytest.CaptureFixture[str]) -> None:
    """The text output names the bytes, the bound ratio and each tier."""
    code = main(
        [
            "transfer",
            "--from",
            "tp=2,dp=4",
            "--to",
            "tp=4,dp=2",
            "-w",
            "8",
            "--to-offset",
            "8",
            "--to-world-size",
            "8",
            "--model",
            "llama-7b",
            "--hosts",
            "n[0-3]",
            "--gpus-per-host",
            "4",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "x the bound" in out and "bytes by tier" in out and "world" in out


def test_cli_refuses_a_bad_layout(capsys: pytest.CaptureFixture[str]) -> None:
    """A layout item that is not FIELD=N exits 2 with one line naming it."""
    code = main(["transfer", "--from", "tp=x", "--to", "tp=2", "-w", "4", "--model", "llama-7b"])
    assert code == 2
    assert "--from item 'tp=x' is not FIELD=N" in capsys.readouterr().err


def test_cli_plans_a_preset_under_gtp(capsys: pytest.CaptureFixture[str]) -> None:
    """``gtp=`` is a layout field; a preset's row-parallel weights under it are 2-D blocks."""
    code = main(
        ["transfer", "--from", "tp=2,gtp=2", "--to", "tp=4", "-w", "8", "--model", "llama-7b"]
    )
    assert code == 0, capsys.readouterr().err
