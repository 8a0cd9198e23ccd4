"""Every command's text fits the terminal and wraps between words; typos get a suggestion.

Law: at a width of 80 or 120 columns no output line is longer than the width (in characters:
the output holds "·"), and the output holds exactly the words it holds on an unbounded terminal
(none split, none lost), for every command of the parser and its text modes, the documented
examples (the ``$ topology`` lines of docs/cli.md), large layouts and Hypothesis-drawn ones;
every ``--help`` fits too. Only ``completion`` is left out: its output is argcomplete's shell
script, which the shell reads, not a person.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import topology._cli.check
import topology._cli.transfer
import topology.cost
from topology import Topology
from topology._cli.main import COMMANDS, build_parser, main
from topology.strategies import topologies

WIDTHS = (80, 120)
DATA = Path(__file__).parent / "data"
RAGGED = str(DATA / "allocation" / "cli" / "ragged_nvl72.toml")
LONG_TIERS = str(DATA / "allocation" / "cli" / "long_tiers.toml")
NVL72 = str(DATA / "allocation" / "nvl72.toml")
MODULES = str(DATA / "modules" / "vision_language.toml")
REPO = Path(__file__).parents[1]
DOCS = REPO / "docs" / "cli.md"
UNCHECKED = {"completion": "argcomplete's shell script, read by the shell"}
"""Commands whose output is not text for a person, and why."""
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
    # check --modules and place --modules
    ("check", "--modules", MODULES, "--gpus-per-node", "8", "--nodes", "2"),
    ("check", "--modules", MODULES, "--gpus-per-node", "8", "--nodes", "1"),
    ("check", "--modules", MODULES, "--hosts", "n[1-4]", "--gpus-per-host", "4"),
    ("place", "--modules", MODULES, "--hosts", "n[1-4]", "--gpus-per-host", "4"),
    # a crossing table too wide for one piece (five long tier names)
    ("check", "-w", "64", "--tp", "4", "--pp", "2", "--allocation", LONG_TIERS),
    ("show", "-w", "64", "--tp", "4", "--pp", "2", "--allocation", LONG_TIERS),
    ("place", "-w", "64", "--tp", "4", "--pp", "2", "--allocation", LONG_TIERS),
    # transfer, with and without --summary, a pipeline split and an allocation
    ("transfer", "--from", "tp=2,pp=2", "--to", "tp=4", "-w", "8", "--model", "llama-7b"),
    ("transfer", "--from", "tp=2,pp=2", "--to", "tp=4", "-w", "8", "--model", "llama-7b",
     "--summary"),
    ("transfer", "--from", "tp=2,pp=4", "--to", "tp=4", "-w", "8", "--model", "llama-7b",
     "--first-stage-layers", "7", "--last-stage-layers", "9"),
    ("transfer", "--from", "pp=16,ep=16,etp=1", "--to", "tp=32,ep=32,etp=1", "-w", "256",
     "--model", "deepseek-v3", "--first-stage-layers", "3", "--last-stage-layers", "2",
     "--hosts", "node[1-64]", "--gpus-per-host", "4"),
    ("transfer", "--from", "tp=2,pp=2,ep=2", "--to", "tp=4,ep=4", "-w", "16", "--model",
     "mixtral-8x7b", "--allocation", LONG_TIERS, "--summary"),
    ("transfer", "--from", "tp=8,pp=2", "--to", "tp=4", "-w", "128", "--model", "llama-70b",
     "--allocation", RAGGED, "--launcher-order", "lexicographic"),
    # reshape, by node rank and by host name, each policy, a long hostfile
    ("reshape", "-w", "128", "--tp", "8", "--pp", "2", "--gpus-per-node", "8", "--lost", "3"),
    ("reshape", "-w", "128", "--tp", "8", "--pp", "2", "--gpus-per-node", "8", "--lost", "3",
     "--policy", "shrink"),
    ("reshape", "-w", "64", "--tp", "8", "--pp", "2", "--gpus-per-node", "8", "--lost-ranks",
     "9", "--spares", "8", "--policy", "spares"),
    ("reshape", "-w", "64", "--tp", "4", "--pp", "2", "--hosts", "node[1-18]",
     "--gpus-per-host", "4", "--lost", "node4"),
    ("reshape", "-w", "32", "--tp", "4", "--hosts", "node[1-9]", "--gpus-per-host", "4",
     "--lost", "node[2,5]"),
    ("reshape", "-w", "224", "--tp", "4", "--pp", "2", "--allocation", RAGGED,
     "--launcher-order", "lexicographic", "--lost", "node[3,17,40]"),
    ("reshape", "-w", "16384", "--tp", "8", "--pp", "8", "--gpus-per-node", "8", "--lost",
     "3,700-709"),
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
    """The words of ``text``, box-drawing borders left out (their length follows the width)
    and a shell line's continuation mark (`` \\`` ending a line of a wrapped command) too."""
    unmarked = "\n".join(line.removesuffix(" \\") for line in text.splitlines())
    words = (word.strip(_BOX) for word in unmarked.split())
    return Counter(word for word in words if word)


def _once(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> None:
    """Let ``owner.name`` compute each distinct call once while this test renders one command
    at several widths (the layouts, checks, plans and transfers are the same; only the text
    differs)."""
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
        _once(patched, topology._cli.transfer, "transfer")
        _once(patched, topology._cli.transfer, "weights")
        _assert_fits_each_width(monkeypatch, capsys, argv)


def _assert_fits_each_width(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    unbounded = _output(monkeypatch, capsys, 100_000, argv)
    for width in WIDTHS:
        out = _output(monkeypatch, capsys, width, argv)
        wide = [line for line in out.splitlines() if len(line) > width]
        assert not wide, f"{' '.join(argv)} at {width} columns: {wide[0]!r}"
        assert _words(out) == _words(unbounded) + _repeated_labels(out), (
            f"{' '.join(argv)} at {width} columns"
        )


_PIECE = re.compile(r"^ *(kind|groups crossing) +groups\b")
"""The header of a table that splits into pieces to fit (check's and place's tier crossing
tables): each piece repeats the kind and groups columns."""


def _repeated_labels(out: str) -> Counter[str]:
    """The words a split table adds: the label columns (up to the end of the header's
    ``groups``) of every piece after the first, a piece that follows the previous one after a
    single blank line."""
    lines = out.splitlines()
    extra: Counter[str] = Counter()
    end, i = -2, 0
    while i < len(lines):
        head = _PIECE.match(lines[i])
        if head is None:
            i += 1
            continue
        stop = next((j for j in range(i, len(lines)) if not lines[j].strip()), len(lines))
        if i == end + 1:
            extra += _words("\n".join(line[: head.end()] for line in lines[i:stop]))
        end, i = stop, stop
    return extra


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


def _commands() -> list[str]:
    """The command names the parser registers."""
    choices = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    return list(choices)


def test_every_command_is_under_the_law() -> None:
    """Each command of the parser has an example above, or a reason to be left out."""
    assert set(_commands()) == {argv[0] for argv in CASES} | set(UNCHECKED)
    assert len(_commands()) == len(COMMANDS)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    world=st.sampled_from([8, 16, 32]),
    sides=st.lists(
        st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4])), min_size=2,
        max_size=2,
    ),
    gpus=st.sampled_from([None, 2, 4, 8]),
    summary=st.booleans(),
)  # fmt: skip
def test_drawn_transfers_fit(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    world: int,
    sides: list[tuple[int, int]],
    gpus: int | None,
    summary: bool,
) -> None:
    """transfer between drawn llama-7b layouts (on hosts, or not) fits with every word whole."""
    (tp, pp), (to_tp, to_pp) = ((t, p) if t * p <= world else (1, 1) for t, p in sides)
    argv = ("transfer", "--from", f"tp={tp},pp={pp}", "--to", f"tp={to_tp},pp={to_pp}", "-w",
            str(world), "--model", "llama-7b")  # fmt: skip
    if gpus is not None:
        argv += ("--hosts", f"n[1-{world // gpus}]", "--gpus-per-host", str(gpus))
    _assert_fits(monkeypatch, capsys, argv + (("--summary",) if summary else ()))


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    topo=topologies(max_world_size=128, max_rank_offset=0).filter(lambda t: t.dp >= 4),
    policy=st.sampled_from(["auto", "drop", "shrink"]),
    data=st.data(),
)  # fmt: skip
def test_drawn_reshapes_fit(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    topo: Topology,
    policy: str,
    data: st.DataObject,
) -> None:
    """reshape of a drawn layout that loses drawn hosts fits with every word whole (a loss it
    cannot survive is one line on stderr, exit 2, and prints nothing)."""
    gpus = data.draw(st.sampled_from([g for g in (1, 2, 4, 8) if topo.world_size % g == 0]))
    hosts = topo.world_size // gpus
    lost = data.draw(st.sets(st.integers(0, hosts - 1), min_size=1, max_size=min(2, hosts)))
    with tempfile.TemporaryDirectory() as folder:
        argv = ("reshape", "--config", _config(topo, folder), "--gpus-per-node", str(gpus),
                "--lost", ",".join(map(str, sorted(lost))), "--policy", policy)  # fmt: skip
        monkeypatch.setenv("COLUMNS", "80")
        if main(list(argv)) == 2:
            out, err = capsys.readouterr()
            assert out == "" and err.count("\n") == 1
            return
        capsys.readouterr()
        _assert_fits(monkeypatch, capsys, argv)


@pytest.mark.parametrize("command", ["", *_commands()])
def test_help_fits(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """topology [COMMAND] --help fits 80 columns (a usage group of alternatives wraps too)."""
    monkeypatch.setenv("COLUMNS", "80")
    assert main([*command.split(), "--help"]) == 0
    wide = [line for line in capsys.readouterr().out.splitlines() if len(line) > 80]
    assert not wide


def _docs_examples() -> list[tuple[list[str], str]]:
    """The ``$ topology`` lines of docs/cli.md (continuations joined, comments dropped) that
    print text, each with the doc's next line (the error it shows, if any)."""
    lines = re.sub(r"\\\n\s*", " ", DOCS.read_text(encoding="utf-8")).splitlines()
    return [
        (shlex.split(line, comments=True)[2:], after)
        for line, after in zip(lines, [*lines[1:], ""], strict=True)
        if line.startswith("$ topology ") and "--json" not in line
    ]


def _repo_paths(argv: list[str]) -> list[str]:
    """``argv`` with each input file (a path relative to the repository) made absolute, so that
    the example runs from a scratch folder; an input the repository lacks fails the test."""
    out = list(argv)
    for index, (flag, value) in enumerate(itertools.pairwise(argv), 1):
        if flag in ("--allocation", "--hostfile", "--config", "--modules", "--slurm-topology"):
            path = REPO / value
            assert path.exists(), f"docs/cli.md reads {value}, which the repository lacks"
            out[index] = str(path)
    return out


@pytest.mark.parametrize("example", _docs_examples(), ids=lambda e: " ".join(e[0][:4]))
def test_docs_examples_fit(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    example: tuple[list[str], str],
) -> None:
    """Each text example of docs/cli.md fits with every word whole; an error example prints
    exactly the error line the doc shows under it."""
    argv, after = example
    argv = _repo_paths(argv)
    monkeypatch.chdir(tmp_path)  # --write-hostfile writes here
    if after.startswith("topology") and ": error: " in after:
        assert main(argv) == 2
        assert capsys.readouterr().err == after + "\n"
        return
    _assert_fits(monkeypatch, capsys, tuple(argv))


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
