"""Every command's text fits the terminal and wraps between words; typos get a suggestion.

Law: at a width of 80 or 120 columns no output line is longer than the width, and the output
holds exactly the words it holds on an unbounded terminal (none split, none lost), for the
documented examples, large layouts and Hypothesis-drawn ones.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import topology._cli.check
import topology.cost
from topology import Topology
from topology._cli.main import main
from topology.strategies import topologies

WIDTHS = (80, 120)
RAGGED = str(Path(__file__).parent / "data" / "allocation" / "cli" / "ragged_nvl72.toml")
_BOX = "┌┐└┘│─"

CASES = (
    # docs/cli.md and scripts/demo_cli.sh
    ("show", "--world-size", "16", "--tp", "2", "--pp", "4", "--gpus-per-node", "8"),
    ("show", "--world-size", "16", "--tp", "2", "--pp", "4"),
    ("rank", "5", "--world-size", "16", "--tp", "2", "--pp", "4", "--gpus-per-node", "8"),
    ("groups", "dp", "--world-size", "16", "--tp", "2", "--pp", "4"),
    ("check", "-w", "4096", "--tp", "8", "--pp", "4", "--order", "dp-tp-cp-ep-pp",
     "--gpus-per-node", "8", "--nodes", "512"),
    ("check", "-w", "4096", "--tp", "8", "--pp", "4", "--gpus-per-node", "8", "--nodes", "512"),
    ("check", "-w", "256", "--tp", "8", "--pp", "4", "--allocation", RAGGED,
     "--launcher-order", "lexicographic"),
    ("place", "-w", "256", "--tp", "8", "--pp", "4", "--allocation", RAGGED,
     "--launcher-order", "lexicographic"),
    ("place", "-w", "256", "--tp", "4", "--ep", "8", "--etp", "1", "--pp", "4",
     "--allocation", RAGGED, "--launcher-order", "lexicographic"),
    ("show", "-w", "256", "--tp", "8", "--pp", "4", "--allocation", RAGGED,
     "--launcher-order", "lexicographic"),
    ("simulate", "--scenario", "all"),
    ("simulate", "--scenario", "1d"),
    ("simulate", "-w", "64", "--tp", "8", "--pp", "2", "--gpus-per-node", "8"),
    ("plan", "-w", "64", "--gpus-per-node", "8", "--model", "llama-7b"),
    # large layouts
    ("show", "-w", "256", "--tp", "8", "--pp", "4", "--cp", "2", "--ep", "4",
     "--gpus-per-node", "8"),
    ("show", "-w", "16384", "--tp", "8", "--pp", "8", "--cp", "2", "--ep", "8",
     "--gpus-per-node", "8"),
    ("show", "-w", "64", "--tp", "4", "--gpus-per-node", "128"),
    ("groups", "dp", "-w", "16384", "--tp", "8", "--pp", "8"),
    ("groups", "dp", "-w", "4096", "--tp", "8", "--full", "--limit", "2"),
    ("rank", "4095", "-w", "4096", "--tp", "8", "--pp", "4", "--cp", "2", "--ep", "8",
     "--gpus-per-node", "8", "--hcp-sizes", "1,2"),
    ("check", "-w", "16384", "--tp", "16", "--pp", "8", "--cp", "4", "--ep", "8",
     "--gpus-per-node", "8", "--nodes", "1000", "--nvlink-domain", "8"),
    ("simulate", "-w", "4096", "--tp", "8", "--pp", "4", "--cp", "2", "--gpus-per-node", "8",
     "--model", "llama-70b"),
    ("plan", "-w", "4096", "--gpus-per-node", "8", "--model", "mixtral-8x7b", "--top", "8"),
)  # fmt: skip


def _output(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], width: int,
            argv: tuple[str, ...]) -> str:  # fmt: skip
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setenv("NO_COLOR", "1")
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return out


def _words(text: str) -> Counter[str]:
    """The words of ``text``, box-drawing borders left out (their length follows the width)."""
    words = (word.strip(_BOX) for word in text.split())
    return Counter(word for word in words if word)


def _once(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> None:
    """Let ``owner.name`` compute each distinct call once while this test renders one command
    at several widths (the layouts and plans are the same; only the text differs)."""
    real = getattr(owner, name)
    seen: dict[str, Any] = {}

    def once(*args: Any, **kwargs: Any) -> Any:
        key = repr((args, sorted(kwargs.items())))
        if key not in seen:
            seen[key] = real(*args, **kwargs)
        return seen[key]

    monkeypatch.setattr(owner, name, once)


def _assert_fits(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    with monkeypatch.context() as patched:
        _once(patched, topology.cost, "plan")
        _once(patched, topology._cli.check, "check")
        _assert_fits_each_width(monkeypatch, capsys, argv)


def _assert_fits_each_width(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    unbounded = _output(monkeypatch, capsys, 100_000, argv)
    for width in WIDTHS:
        out = _output(monkeypatch, capsys, width, argv)
        wide = [line for line in out.splitlines() if len(line) > width]
        assert not wide, f"{' '.join(argv)} at {width} columns: {wide[0]!r}"
        assert _words(out) == _words(unbounded), f"{' '.join(argv)} at {width} columns"


@pytest.mark.parametrize("argv", CASES, ids=lambda argv: " ".join(argv[:4]))
def test_documented_and_large_examples_fit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    """Each example fits 80 and 120 columns with every word whole."""
    _assert_fits(monkeypatch, capsys, argv)


def _config(topo: Topology, folder: str) -> str:
    path = Path(folder) / "layout.json"
    path.write_text(json.dumps(topo.to_dict()), encoding="utf-8")
    return str(path)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    topo=topologies(max_world_size=256),
    gpus=st.sampled_from([1, 2, 4, 8, 16]),
    data=st.data(),
)  # fmt: skip
def test_drawn_layouts_fit(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    topo: Topology,
    gpus: int,
    data: st.DataObject,
) -> None:
    """show, groups, rank and check on drawn layouts fit with every word whole."""
    kind = data.draw(st.sampled_from(topo.kinds))
    rank = data.draw(st.integers(topo.rank_offset, topo.rank_offset + topo.world_size - 1))
    with tempfile.TemporaryDirectory() as folder:
        layout = ("--config", _config(topo, folder))
        cluster = ("--gpus-per-node", str(gpus))
        for argv in (
            ("show", *layout, *cluster),
            ("show", *layout),
            ("groups", kind, *layout),
            ("groups", kind, "--full", *layout),
            ("rank", str(rank), *layout, *cluster),
            ("check", *layout, *cluster),
        ):
            _assert_fits(monkeypatch, capsys, argv)


# -- suggestions --------------------------------------------------------------------------------


def _error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    return captured.err.strip()


def test_mistyped_flag_suggests_the_closest(capsys: pytest.CaptureFixture[str]) -> None:
    """show --tpp 2 exits 2 naming the command and suggesting --tp."""
    assert _error(capsys, "show", "--tpp", "2", "-w", "8") == (
        "topology show: error: unrecognized argument --tpp; did you mean --tp?"
    )


def test_mistyped_flag_with_value_suggests(capsys: pytest.CaptureFixture[str]) -> None:
    """--gpu-per-node=8 (with '=') is matched on the flag alone."""
    assert _error(capsys, "check", "-w", "8", "--gpu-per-node=8") == (
        "topology check: error: unrecognized argument --gpu-per-node=8; "
        "did you mean --gpus-per-node?"
    )


def test_mistyped_command_suggests_the_closest(capsys: pytest.CaptureFixture[str]) -> None:
    """topology shwo exits 2 suggesting show."""
    assert _error(capsys, "shwo") == "topology: error: unknown command 'shwo'; did you mean 'show'?"


def test_mistyped_choice_suggests_the_closest(capsys: pytest.CaptureFixture[str]) -> None:
    """--color-by ppp suggests pp."""
    assert _error(capsys, "show", "-w", "8", "--color-by", "ppp") == (
        "topology show: error: unknown --color-by value 'ppp'; did you mean 'pp'?"
    )


def test_unlike_flag_points_at_help(capsys: pytest.CaptureFixture[str]) -> None:
    """A flag like no valid one still names the command and points at its --help."""
    assert _error(capsys, "rank", "1", "-w", "8", "--zzzzzz") == (
        "topology rank: error: unrecognized arguments: --zzzzzz; see 'topology rank --help'"
    )


# -- help ---------------------------------------------------------------------------------------


def _help(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *argv: str) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    assert main([*argv, "--help"]) == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("command", ["simulate", "plan"])
def test_model_help_lists_presets(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """--model's help names every model preset and --hardware's every hardware preset."""
    from topology.cost import HARDWARE, MODELS

    text = _help(capsys, monkeypatch, command)
    assert ", ".join(MODELS) in text and ", ".join(HARDWARE) in text


def test_simulate_help_has_no_internal_jargon(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """simulate --help says what the toy scenarios are instead of 'seed 003'."""
    text = _help(capsys, monkeypatch, "simulate")
    assert "seed" not in text.lower() and "toy GPU model" in text
