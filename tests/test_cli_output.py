"""CLI output stays bounded at any world size: groups, rank and show at up to 2**40 ranks."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from topology import Topology
from topology._cli.main import main

BIG = str(1 << 40)


@pytest.fixture(autouse=True)
def _eighty_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lay text out for an 80-column terminal, whatever terminal runs the tests."""
    monkeypatch.setenv("COLUMNS", "80")


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    return json.loads(_run(capsys, *args, "--json"))


def test_groups_text_at_2_40_is_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    """groups tp at 2**40 prints 64 groups and says how many it left out."""
    lines = _run(capsys, "groups", "tp", "-w", BIG, "--tp", "8").splitlines()
    assert len(lines) == 1 + 64 + 1
    assert lines[-1] == f"… {(1 << 37) - 64} more groups not shown (use --limit N)"


def test_groups_text_abbreviates_long_groups(capsys: pytest.CaptureFixture[str]) -> None:
    """A dp group of 2**35 ranks prints its first eight ranks, the last, and the size."""
    lines = _run(capsys, "groups", "dp", "-w", BIG, "--tp", "8", "--pp", "4").splitlines()
    last = 8 * ((1 << 35) - 1)
    starts = [line for line in lines if re.match(r" ?\d+  \[", line)]
    assert starts[0] == f" 0  [0, 8, 16, 24, 32, 40, 48, 56, …, {last}] ({1 << 35} ranks)"
    assert len(starts) == 32


def test_groups_full_keeps_huge_groups_summarised(capsys: pytest.CaptureFixture[str]) -> None:
    """--full spells out short groups but says it keeps groups over 65536 ranks summarised."""
    out = _run(capsys, "groups", "dp", "-w", BIG, "--tp", "8", "--pp", "4", "--full")
    assert out.splitlines()[-1] == (
        f"(--full spells out groups of at most 65536 ranks; these have {1 << 35})"
    )
    short = _run(capsys, "groups", "dp", "-w", "256", "--full", "--limit", "1")
    lines = short.splitlines()[1:]  # one group of 256 ranks, wrapped under itself at 80 columns
    assert all(len(line) <= 80 for line in lines) and lines[0].startswith("0  [0, 1, 2, ")
    assert all(line.startswith("   ") for line in lines[1:])
    assert (
        " ".join(line.strip() for line in lines) == "0  [" + ", ".join(map(str, range(256))) + "]"
    )


def test_groups_limit_counts_what_it_leaves_out(capsys: pytest.CaptureFixture[str]) -> None:
    """--limit 3 shows three groups and reports the other count - 3."""
    out = _run(capsys, "groups", "tp", "-w", "64", "--tp", "2", "--limit", "3")
    assert out.splitlines()[1:] == [
        " 0  [0, 1]",
        " 1  [2, 3]",
        " 2  [4, 5]",
        "… 29 more groups not shown (use --limit N)",
    ]


def test_groups_json_summarises_long_groups(capsys: pytest.CaptureFixture[str]) -> None:
    """groups --json at 2**40: 64 groups, each {size, first, last, runs}, the rest counted."""
    data = _json(capsys, "groups", "dp", "-w", BIG, "--tp", "8", "--pp", "4")
    dp = (1 << 40) // 32
    assert (data["count"], len(data["groups"]), data["omitted"]) == (32, 32, 0)
    tp = _json(capsys, "groups", "tp", "-w", BIG, "--tp", "8")
    assert (len(tp["groups"]), tp["omitted"], tp["truncated"]) == (64, (1 << 37) - 64, True)
    group = data["groups"][5]
    first = 5 % 8 + (5 // 8) * 8 * dp  # tp rank 5 % 8 of stage 5 // 8
    assert group == {
        "size": dp,
        "first": [first + 8 * i for i in range(8)],
        "last": first + 8 * (dp - 1),
        "runs": [[dp, 8]],
    }


def test_groups_json_lists_short_groups(capsys: pytest.CaptureFixture[str]) -> None:
    """A group of at most 1024 ranks is still a plain list of its ranks."""
    data = _json(capsys, "groups", "dp", "-w", "64", "--tp", "2")
    assert data["groups"][:2] == [list(range(0, 64, 2)), list(range(1, 64, 2))]


def test_rank_at_2_40_is_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    """rank R at 2**40 prints abbreviated groups; --json gives summaries with runs."""
    rank = (1 << 40) - 1
    out = _run(capsys, "rank", str(rank), "-w", BIG, "--tp", "8", "--pp", "4")
    assert len(out) < 5_000 and f"({1 << 35} ranks)" in out
    data = _json(capsys, "rank", str(rank), "-w", BIG, "--tp", "8", "--pp", "4")
    dp = data["groups"]["dp"]
    assert dp["local_rank"] == (1 << 35) - 1 and dp["size"] == 1 << 35
    assert dp["ranks"]["last"] == rank and dp["ranks"]["runs"] == [[1 << 35, 8]]
    assert data["pipeline"]["ranks"] == [rank - k * (1 << 38) for k in (3, 2, 1, 0)]


def test_show_with_a_billion_gpus_per_node_draws_only_the_layout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """show --gpus-per-node 10**9 draws the 16 ranks and counts the idle GPUs."""
    out = _run(capsys, "show", "-w", "16", "--tp", "2", "--gpus-per-node", "1000000000")
    assert out.count(" r") >= 16 and len(out) < 10_000
    assert f"+ {10**9 - 16} more GPUs outside this layout" in out


def test_show_svg_with_a_huge_node_is_small(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    """The SVG of 16 ranks on a billion-GPU node holds 16 cells."""
    target = tmp_path / "huge.svg"
    _run(capsys, "show", "-w", "16", "--gpus-per-node", "1000000000", "--svg", str(target))
    text = target.read_text()
    assert text.count("<title>rank ") == 16 and len(text) < 50_000


def test_show_at_2_40_gives_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    """show at 2**40 with a cluster prints the per-kind table with node counts."""
    out = _run(capsys, "show", "-w", BIG, "--tp", "8", "--pp", "8", "--gpus-per-node", "8")
    topo = Topology(1 << 40, tp=8, pp=8)
    assert len(out.splitlines()) == 3 + len(topo.kinds)
    assert any(line.split()[:2] == ["dp", str(1 << 34)] for line in out.splitlines())
