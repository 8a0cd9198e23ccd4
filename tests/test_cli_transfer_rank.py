"""``topology transfer --rank R`` and ``--write-plans DIR`` (issue 32, item 3): one rank's part
and every rank's file equal the whole plan's operations; the manifest and the params table
match the schema; bad sizes and paths are exit 2 before any planning."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.test_cli_inputs import assert_invalid, invoke
from tests.test_cli_json_schema import _assert_valid
from topology import Topology, transfer, weights

ARGS = ["--from", "tp=2,ep=2,etp=1", "--to", "tp=4,gtp=1", "-w", "4", "--model", "mixtral-8x7b"]
APART = [*ARGS, "--to-offset", "4"]
"""Mixtral from tp 2 x ep 2 (dp 2) to tp 4 on the next four ranks."""


def _json(*argv: str) -> dict[str, Any]:
    code, out, err = invoke(*argv, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert isinstance(data, dict)
    return data


def _plan() -> Any:
    src = Topology(4, tp=2, ep=2, etp=1)
    return transfer(src, Topology(4, tp=4, rank_offset=4), weights("mixtral-8x7b"))


def test_rank_json_is_that_ranks_part_of_the_plan() -> None:
    """--rank R --json lists R's sends then receives, as the whole plan's for_rank(R)."""
    plan = _plan()
    for rank in (0, 5):
        data = _json("transfer", *APART, "--rank", str(rank))
        _assert_valid("transfer", data)
        assert data["rank"] == rank and "stats" not in data
        assert data["ops"] == [op.to_dict() for op in plan.for_rank(rank).ops]


def test_write_plans_files_hold_each_ranks_part(tmp_path: Path) -> None:
    """Every rank's file is its sends then receives, one op a line; the manifest carries the
    whole plan's stats and validates against the schema."""
    plan = _plan()
    code, out, err = invoke("transfer", *APART, "--write-plans", str(tmp_path))
    assert code == 0, err
    assert "plans written: 8 rank files" in out
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    _assert_valid("transfer-manifest", manifest)
    assert manifest["stats"] == plan.stats
    assert [f["rank"] for f in manifest["files"]] == list(range(8))
    every = []
    for listed in manifest["files"]:
        lines = (tmp_path / listed["path"]).read_text().splitlines()
        ops = [json.loads(line) for line in lines]
        mine = plan.for_rank(listed["rank"])
        assert ops == [op.to_dict() for op in mine.ops]
        assert (listed["sends"], listed["recvs"]) == (len(mine.sends), len(mine.recvs))
        every += ops[: listed["sends"]]
    assert every == sorted((op.to_dict() for op in plan.ops), key=lambda op: op["src"])


def test_write_plans_lines_carry_the_rows_of_2d_blocks(tmp_path: Path) -> None:
    """Under GTP a row-parallel weight moves as 2-D blocks: their lines carry "rows"."""
    argv = ["--from", "tp=2,gtp=2", "--to", "tp=4", "-w", "4", "--model", "llama-7b"]
    assert invoke("transfer", *argv, "--write-plans", str(tmp_path))[0] == 0
    plan = transfer(Topology(4, tp=2, gtp=2), Topology(4, tp=4), weights("llama-7b"))
    lines = (tmp_path / "rank-1.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [op.to_dict() for op in plan.for_rank(1).ops]
    assert any('"rows"' in line for line in lines)


def test_json_params_table_is_the_destinations_sharding() -> None:
    """--json (and --summary) carries each destination weight's name, shape, dtype, shards."""
    data = _json("transfer", *APART, "--summary")
    _assert_valid("transfer", data)
    names = [p.name for p in weights("mixtral-8x7b")]
    assert [row["name"] for row in data["params"]] == names
    embedding = data["params"][0]
    assert embedding["dtype"] == "bfloat16" and embedding["dim"] == 0
    runs = [shard["ranks"] for shard in embedding["shards"]]
    assert runs == [[[r, r + 1, 1]] for r in range(4, 8)]


def test_rank_text_lists_its_operations() -> None:
    """--rank R prints R's counts and one line per operation."""
    code, out, err = invoke("transfer", *APART, "--rank", "5")
    assert code == 0, err
    mine = _plan().for_rank(5)
    assert f"receives {len(mine.recvs):,}" in out
    assert out.count(" recv from ") == len(mine.recvs)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        ([*APART, "--rank", "8"], "rank must be at most 7, the layouts span ranks 0..7, got 8"),
        ([*APART, "--rank", "-1"], "rank must be a non-negative int"),
        ([*APART, "--rank", "1", "--write-plans", "x"], "--rank and --write-plans both given"),
        (
            ["--from", "tp=8", "--to", "tp=8", "-w", str(2**40), "--model", "llama-7b"],
            "must be at most 131072 (2**17), the most ranks a transfer plan spans",
        ),
    ],
)
def test_bad_sizes_are_refused(argv: list[str], fragment: str) -> None:
    """A rank outside the layouts, both modes at once or a world too large: exit 2."""
    assert_invalid(*invoke("transfer", *argv)[::2], fragment)


def test_write_plans_into_a_file_is_refused(tmp_path: Path) -> None:
    """--write-plans naming a file is exit 2, before any planning."""
    path = tmp_path / "taken"
    path.write_text("")
    assert_invalid(*invoke("transfer", *APART, "--write-plans", str(path))[::2], "is a file")


@pytest.mark.parametrize(
    ("folder", "fragment"),
    [("", "--write-plans is empty"), ("x" * 5000, "File name too long"), ("a\0b", "null")],
)
def test_write_plans_into_an_impossible_folder_is_refused(folder: str, fragment: str) -> None:
    """An empty, too long or NUL-holding folder name is exit 2 with one line."""
    assert_invalid(*invoke("transfer", *APART, "--write-plans", folder)[::2], fragment)
