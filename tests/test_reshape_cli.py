"""``topology reshape``: the table of kinds, the moves, the hostfile and the JSON object."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from topology._cli.main import main

ARGS = ["reshape", "-w", "64", "--tp", "8", "--pp", "2", "--gpus-per-node", "8"]


def test_text_lists_kinds_moves_and_the_new_hostfile(capsys: pytest.CaptureFixture[str]) -> None:
    """Losing host 1 drops one replica: dp 4 -> 3, the hostfile skips hosts 1 and 5."""
    assert main([*ARGS, "--lost", "1"]) == 0
    out = capsys.readouterr().out
    assert "policy drop: tp8·cp1·ep1·dp4·pp2 (tp fastest) -> tp8·cp1·ep1·dp3·pp2" in out
    assert "48 survivors active, 48 keep their shard" in out
    assert "dp                  0      16    0        0" in out
    assert "new hostfile (6 hosts):\n  host0 slots=8\n  host2 slots=8" in out


def test_spares_name_the_ranks_that_fetch_their_shard(capsys: pytest.CaptureFixture[str]) -> None:
    """A spare host 8 takes host 1's place; its ranks fetch their shard from a replica."""
    assert main([*ARGS, "--lost-ranks", "9", "--spares", "8", "--policy", "spares"]) == 0
    out = capsys.readouterr().out
    assert "new rank 8 <- old rank 0" in out
    assert "  host0 slots=8\n  host8 slots=8\n  host2 slots=8" in out


def test_json_has_the_issue_keys(capsys: pytest.CaptureFixture[str]) -> None:
    """--json gives schema, new, rank_of, keeps_shard, active and communicators."""
    assert main([*ARGS, "--lost-ranks", "8-15", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "rank-topology/reshape/2"
    assert data["new"]["world_size"] == 48 and data["rank_of"][8] is None
    assert (data["keeps_shard"], data["active"]) == (48, 48)
    assert data["communicators"]["tp"] == {"reuse": 6, "trim": 0, "rebuild": 0}


def test_bad_ranges_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """A backwards range is a usage error that names it."""
    assert main([*ARGS, "--lost-ranks", "7-3"]) == 2
    assert "range '7-3' runs backwards" in capsys.readouterr().err


ALLOCATION = """
[[tiers]]
name = "rack"

[[hosts]]
names = "node[1-4]"
gpus = 8
domains = { rack = "r1" }

[[hosts]]
name = "spare-far"
gpus = 8
domains = { rack = "r2" }

[[hosts]]
name = "spare-near"
gpus = 8
domains = { rack = "r1" }
"""


def test_allocation_spares_prefer_the_lost_host_rack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The allocation's hosts after the layout's are spares; the one in the lost rack wins."""
    path = tmp_path / "alloc.toml"
    path.write_text(ALLOCATION)
    args = ["reshape", "-w", "32", "--tp", "8", "--gpus-per-node", "8", "--lost", "1"]
    assert main([*args, "--allocation", str(path), "--policy", "spares"]) == 0
    out = capsys.readouterr().out
    assert "  node1 slots=8\n  spare-near slots=8\n  node3 slots=8\n  node4 slots=8" in out
