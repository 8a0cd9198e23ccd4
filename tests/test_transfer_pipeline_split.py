"""The transfer under Megatron's pipeline split: placements, plans and the CLI.

Golden tables first: DeepSeek-V3's 61 layers at pp 16 under NeMo-RL's recipe
(``num_layers_in_first_pipeline_stage: 3``, ``num_layers_in_last_pipeline_stage: 2``,
``examples/configs/grpo_dapomath17k_dsv3_megatron.yaml``) and Megatron-Bridge's layout; then a
plan whose every source is on its layer's stage, colocated bytes held or received exactly once,
the refusals, and the CLI's flags, LAYOUT keys and JSON.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from topology import Param, PipelineSplit, Topology, TopologyError, param_placement, transfer
from topology._cli.main import main
from topology._transfer.param_placement import layer_chunks

NEMO_RL = PipelineSplit(first_stage_layers=3, last_stage_layers=2)
BRIDGE = PipelineSplit(layout="Et*4|(t*4|)*14,tmL")
PP16 = Topology(16, pp=16)


def _stage_counts(chunks: tuple[tuple[int, int], ...]) -> list[int]:
    return [sum(stage == s for stage, _ in chunks) for s in range(16)]


def test_deepseek_v3_at_pp_16_under_nemo_rl_recipe() -> None:
    """3 layers on stage 0, 4 on each of stages 1..14, 2 on stage 15 (not 4 x 13, 3 x 3)."""
    chunks = layer_chunks(PP16, 61, NEMO_RL)
    assert _stage_counts(chunks) == [3] + [4] * 14 + [2]
    assert [chunks[i][0] for i in (0, 2, 3, 6, 7, 58, 59, 60)] == [0, 0, 1, 1, 2, 14, 15, 15]
    assert _stage_counts(layer_chunks(PP16, 61)) == [4] * 13 + [3] * 3  # None: unchanged


def test_deepseek_v3_at_pp_16_under_megatron_bridge_layout() -> None:
    """Megatron-Bridge's pp 16 layout: 4 layers on stages 0..14, the last (and MTP) on 15."""
    assert _stage_counts(layer_chunks(PP16, 61, BRIDGE)) == [4] * 15 + [1]


def test_param_placement_follows_the_split() -> None:
    """A layer's weight sits on its stage under the split, on the array_split stage without."""
    w = Param("decoder.layers.3.mlp.linear_fc1.weight", (8, 4), sharding="column", layer=3)
    assert {s.stage for s in param_placement(PP16, w, num_layers=61).shards} == {0}
    placed = param_placement(PP16, w, num_layers=61, pipeline_split=NEMO_RL)
    assert [(s.stage, s.ranks) for s in placed.shards] == [(1, (1,))]


def _layer_weights(num_layers: int) -> list[Param]:
    return [Param(f"l{i}", (8, 4), sharding="column", layer=i) for i in range(num_layers)]


def test_every_source_is_on_its_layers_stage() -> None:
    """Each operation's sender is on the stage the source split gives the weight's layer."""
    src = Topology(32, tp=2, pp=16)
    plan = transfer(
        src, Topology(32, tp=4, rank_offset=32), _layer_weights(61), src_pipeline_split=NEMO_RL
    )
    stages = layer_chunks(src, 61, NEMO_RL)
    assert plan.ops and all(src.stage(op.src) == stages[op.param.layer or 0][0] for op in plan.ops)
    assert plan.src_pipeline_split == NEMO_RL and plan.dst_pipeline_split is None


def test_colocated_bytes_are_held_or_received_once() -> None:
    """Colocated, two splits of one pp: each rank holds or receives each needed byte once."""
    src, dst = Topology(4, pp=4), Topology(4, pp=4)
    split = PipelineSplit(first_stage_layers=1, last_stage_layers=1)
    weights = _layer_weights(6)
    plan = transfer(src, dst, weights, src_pipeline_split=split)
    for rank in range(4):
        got = sum(op.nbytes for op in (*plan.recvs(rank), *plan.held(rank)))
        needed = sum(
            w.nbytes for w in weights if dst.stage(rank) == layer_chunks(dst, 6)[w.layer or 0][0]
        )
        assert got == needed
    assert transfer(src, dst, weights, src_pipeline_split=split, dst_pipeline_split=split).ops == ()


def test_a_split_megatron_refuses_is_refused_naming_the_side() -> None:
    """The side, its split and its layout lead the message; a non-split is refused too."""
    with pytest.raises(
        TopologyError,
        match=r"^src_pipeline_split \(even\) on tp1·cp1·ep1·dp1·pp16 "
        r"\(tp fastest\): num_layers 61 is not divisible by pp\(16\)",
    ):
        transfer(PP16, Topology(16), _layer_weights(61), src_pipeline_split=PipelineSplit())
    with pytest.raises(TopologyError, match=r"dst_pipeline_split must be a PipelineSplit or None"):
        transfer(PP16, Topology(16), _layer_weights(61), dst_pipeline_split=3)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match=r"pipeline_split must be a PipelineSplit or None"):
        param_placement(PP16, _layer_weights(1)[0], num_layers=61, pipeline_split="3,2")  # type: ignore[arg-type]


def _cli(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exit_:
            code = int(exit_.code or 0)
    return code, out.getvalue(), err.getvalue()


DSV3 = ["transfer", "--from", "pp=16,ep=16,etp=1", "--to", "tp=32,ep=32,etp=1", "-w", "256"]
DSV3 += ["--model", "deepseek-v3"]


def test_cli_flags_give_the_from_side_its_split() -> None:
    """--first-stage-layers / --last-stage-layers split --from; the text names both splits."""
    code, out, _ = _cli([*DSV3, "--first-stage-layers", "3", "--last-stage-layers", "2"])
    assert code == 0 and "  pipeline split first 3, last 2 -> even\n" in out


def test_cli_layout_keys_and_json(tmp_path: Path) -> None:
    """LAYOUT keys (ours, or Megatron's in a JSON file) split each side; --json gives both."""
    layout = tmp_path / "train.json"
    layout.write_text(
        json.dumps(
            {
                "pp": 16,
                "ep": 16,
                "etp": 1,
                "num_layers_in_first_pipeline_stage": 3,
                "num_layers_in_last_pipeline_stage": 2,
            }
        )
    )
    code, out, err = _cli(
        [
            "transfer",
            "--from",
            str(layout),
            "--to",
            "pp=16,ep=16,pipeline_layout=Et*4|(t*4|)*14tmL",
            "-w",
            "256",
            "--model",
            "deepseek-v3",
            "--summary",
            "--json",
        ]
    )
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    assert data["from_pipeline_split"] == NEMO_RL.to_megatron()
    assert data["to_pipeline_split"]["pipeline_model_parallel_layout"] == "Et*4|(t*4|)*14tmL"
    code, out, _ = _cli([*DSV3, "--summary", "--json"])
    assert json.loads(out)["from_pipeline_split"] is None


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--first-stage-layers", "4"], "src_pipeline_split (first 4) on tp1·cp1·ep16·dp16·pp16"),
        (["--pipeline-layout", "Et|tL"], "has 2 chunks, not pp(16) * vpp(1) = 16"),
    ],
)
def test_cli_refuses_a_split_megatron_refuses(extra: list[str], match: str) -> None:
    """A bad split is one clean error naming the side."""
    code, _, err = _cli([*DSV3, *extra])
    assert code == 2 and match in err


def test_cli_refuses_a_split_given_twice() -> None:
    """A flag and the --from LAYOUT key that disagree, or one key in two spellings, refuse."""
    args = [*DSV3, "--first-stage-layers", "3"]
    args[2] = "pp=16,ep=16,etp=1,first_stage_layers=2"
    code, _, err = _cli(args)
    assert code == 2 and "--first-stage-layers 3 and --from's first_stage_layers=2 disagree" in err
    args = [*DSV3]
    args[2] = "pp=16,first_stage_layers=3,num_layers_in_first_pipeline_stage=3"
    code, _, err = _cli(args)
    assert code == 2 and "is not FIELD=N" in err
