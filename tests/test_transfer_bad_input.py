"""Bad input to ``topology.transfer``, its plan and the ``transfer`` command: each one a
TopologyError (exit 2) with one line naming the value, never a traceback or a huge allocation."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology import Param, Topology, TopologyError, Transfer, transfer, weights
from topology._cli.main import main

W = [Param("w", (8, 8), sharding="column", layer=0)]
SRC, DST = Topology(2, tp=2), Topology(2, dp=2, rank_offset=2)
BASE = ["transfer", "--model", "llama-7b"]


def _plan() -> Transfer:
    return transfer(SRC, DST, W)


API: list[tuple[str, Callable[[], object], str]] = [
    ("num_layers str", lambda: transfer(SRC, DST, W, num_layers="3"), "num_layers must be"),  # type: ignore[arg-type]
    ("num_layers 0", lambda: transfer(SRC, DST, W, num_layers=0), "num_layers must be a positive"),
    ("num_layers bool", lambda: transfer(SRC, DST, W, num_layers=True), r"got True \(bool\)"),
    ("params str", lambda: transfer(SRC, DST, "w"), "params must be a non-empty sequence"),  # type: ignore[arg-type]
    ("params int", lambda: transfer(SRC, DST, 5), "params must be a non-empty sequence"),  # type: ignore[arg-type]
    ("src None", lambda: transfer(None, DST, W), r"src must be a Topology, got None"),  # type: ignore[arg-type]
    ("split str", lambda: transfer(SRC, DST, W, dst_pipeline_split="x"), "must be a PipelineSplit"),  # type: ignore[arg-type]
    (
        "world past 2**17",
        lambda: transfer(Topology(2**40, tp=8), Topology(2**40, tp=8), W),
        r"plan's ranks .* must be at most 131072 \(2\*\*17\), the most ranks a transfer plan",
    ),
    (
        "offset past 2**17",
        lambda: transfer(SRC, Topology(2, rank_offset=2**17), W),
        r"must be at most 131072 \(2\*\*17\).*got 131074",
    ),
    ("itemsize str", lambda: weights("llama-7b", itemsize="2"), r"itemsize must be a positive int"),  # type: ignore[arg-type]
    ("itemsize 0", lambda: weights("llama-7b", itemsize=0), r"itemsize must be a positive int"),
    ("preset list", lambda: weights(["x"]), r"unknown model preset \['x'\]"),  # type: ignore[arg-type]
    ("sends str", lambda: _plan().sends("0"), r"rank must be a non-negative int, got '0'"),  # type: ignore[arg-type]
    ("sends list", lambda: _plan().sends([0]), r"rank must be a non-negative int, got \[0\]"),  # type: ignore[arg-type]
    ("recvs -1", lambda: _plan().recvs(-1), r"rank must be a non-negative int, got -1"),
    ("recvs bool", lambda: _plan().recvs(True), r"got True \(bool\)"),
    ("held float", lambda: _plan().held(1.0), r"rank must be a non-negative int, got 1.0"),  # type: ignore[arg-type]
]


def test_a_rank_outside_the_plan_has_nothing_to_do() -> None:
    """A rank past both layouts (a world larger than the plan) sends, receives and holds nothing."""
    plan = transfer(SRC, DST, W)
    assert plan.sends(4) == plan.recvs(4) == plan.held(2**40) == ()


@pytest.mark.parametrize(("what", "call", "message"), API, ids=[row[0] for row in API])
def test_public_functions_refuse_bad_arguments(
    what: str, call: Callable[[], object], message: str
) -> None:
    """Each wrong type or value to a public transfer function raises its pinned TopologyError."""
    with pytest.raises(TopologyError, match=message):
        call()


CLI: list[tuple[list[str], str]] = [
    (["--from", "tp=2,tp=4", "--to", "tp=2", "-w", "4"], "--from gives tp twice ('tp=2', 'tp=4')"),
    (
        ["--from", "tp=2", "--to", "dp=4,world-size=4,world_size=4"],
        "--to gives world_size twice ('world-size=4', 'world_size=4')",
    ),
    (["--from", "order=tp-dp,order=dp-tp", "--to", "tp=2", "-w", "2"], "--from gives order twice"),
    (
        ["--from", "tp=2,world_size=8", "--to", "tp=2", "-w", "4"],
        "-w 4 and --from's world_size=8 disagree; give one",
    ),
    (
        ["--from", "tp=2", "--to", "tp=2,world_size=2", "-w", "4"],
        "-w 4 and --to's world_size=2 disagree; give one",
    ),
    (
        ["--from", "tp=2", "--to", "tp=2,world_size=2", "-w", "4", "--to-world-size", "4"],
        "--to-world-size 4 and --to's world_size=2 disagree",
    ),
    (
        ["--from", "tp=2", "--to", "tp=2,rank_offset=2", "-w", "2", "--to-offset", "4"],
        "--to-offset 4 and --to's rank_offset=2 disagree",
    ),
    (
        ["--from", "tp=8", "--to", "tp=8", "-w", "1099511627776"],
        "must be at most 131072 (2**17), the most ranks a transfer plan spans",
    ),
    (
        ["--from", "tp=8", "--to", "tp=8", "-w", "8", "--to-offset", "131072"],
        "the plan's ranks (max of rank_offset + world_size) must be at most 131072",
    ),
    (["--from", "tp=８", "--to", "tp=2", "-w", "2"], "--from item 'tp=８' is not FIELD=N"),
    (["--from", "tp=٢", "--to", "tp=2", "-w", "2"], "--from item 'tp=٢' is not FIELD=N"),
    (["--from", "tp=2", "--to", "tp=2", "-w", "٢"], "world_size must be a positive int in plain"),
    (
        ["--from", "tp=2", "--to", "tp=2", "-w", "2", "--hardware", "b200"],
        "unknown hardware 'b200'",
    ),
    (
        ["--from", "tp=2", "--to", "tp=2", "-w", "2", "--hardware", "a100"],
        "--hardware a100 times the plan on an allocation; give one",
    ),
]


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


@pytest.mark.parametrize(("argv", "message"), CLI, ids=[" ".join(row[0]) for row in CLI])
def test_cli_refuses_bad_layouts_with_one_line(argv: list[str], message: str) -> None:
    """Each bad layout or count exits 2 with one line on stderr holding its message."""
    code, err = _run([*BASE, *argv])
    assert (code, err.count("\n")) == (2, 1), err
    assert message in err


_KEYS = (
    "world_size",
    "tp",
    "pp",
    "cp",
    "ep",
    "etp",
    "dp",
    "vpp",
    "gtp",
    "egtp",
    "rank_offset",
    "first_stage_layers",
    "last_stage_layers",
)
_ANY = st.text(st.characters(codec="utf-8", exclude_characters=","), max_size=8)
_NOT_DIGITS = _ANY.filter(lambda v: not (v.isascii() and v.isdigit() and 0 < len(v) <= 30))
_OTHER_DIGITS = st.text(st.sampled_from("٠١٢٣٤٥٦٧٨٩０１２３４５６７８９०१"), min_size=1, max_size=4)
_BAD_ITEMS = st.one_of(
    st.tuples(st.sampled_from(_KEYS), _NOT_DIGITS).map("=".join),
    st.tuples(st.sampled_from(_KEYS), _OTHER_DIGITS).map("=".join),
    st.tuples(
        _ANY.filter(
            lambda k: (
                k.strip().replace("-", "_")
                not in (
                    *_KEYS,
                    "order",
                    "pipeline_layout",
                    "account_for_embedding",
                    "account_for_loss",
                )
            )
        ),
        _ANY,
    ).map("=".join),
    st.sampled_from(_KEYS).map(lambda k: f"{k}=2,{k}=2"),
)
_GOOD_ITEMS = st.sampled_from(("tp=1", "dp=1", "pp=1", "order=tp-cp-ep-dp-pp"))


@given(st.lists(_GOOD_ITEMS, max_size=3), _BAD_ITEMS, st.lists(_GOOD_ITEMS, max_size=3))
def test_junk_layouts_exit_2_with_one_line(before: list[str], bad: str, after: list[str]) -> None:
    """A layout string with a junk item (unknown key, a count not in ASCII digits, a key twice)
    exits 2 with exactly one line on stderr."""
    junk = ",".join([*before, bad, *after])
    code, err = _run([*BASE, f"--from={junk}", "--to", "tp=1", "-w", "1"])
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.endswith("\n"), err
