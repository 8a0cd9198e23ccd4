"""Clean errors from the machine layer and the CLI on every bad input (issue 31, item 7).

Laws: the public constructors and readers of hosts and allocations, fed wrong types, numbers past
a float, host names of thousands of digits, huge host-list ranges and malformed lines, raise
nothing but a one-line ``TopologyError``; fields that need a type refuse every other one; every
``topology`` command given a bad value for any of its options, or an unknown argument, exits 2
with one line on stderr (never 3, the internal-error code). Goldens pin the messages of the
cases that used to escape or to be read silently.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology import (
    Allocation,
    Cluster,
    Host,
    Tier,
    TopologyError,
    compress_hostlist,
    expand_hostlist,
    read_allocation,
    read_hostfile,
    read_slurm_topology,
    read_topograph,
)
from topology._cli.main import build_parser, main
from topology._machine.hostlist import MAX_DIGITS, MAX_HOSTS
from topology._machine.readers.hostfile import parse_hostfile
from topology._machine.readers.native_format import allocation_from_dict
from topology._machine.readers.slurm_topology import parse_slurm_topology
from topology._machine.readers.topograph import parse_topograph

BIG_TEXT = "1" + "0" * 400
"""A number past a float, spelt in a text input."""

HUGE_NAME = "n" + "9" * 5000
"""A host name past Python's 4,300-digit int() limit."""

HOSTILE: list[object] = [
    None,
    True,
    False,
    0,
    -1,
    1.5,
    float("nan"),
    float("inf"),
    1e308,
    10**400,
    2**64,
    "",
    " ",
    "x",
    "a\nb",
    BIG_TEXT,
    HUGE_NAME,
    "n[0-99999999999999999999]",
    "n[0-" + "9" * (MAX_DIGITS + 6) + "]",
    "n[1-3",
    "n[3-1]",
    [],
    ["a"],
    ["a", "a"],
    [None],
    [["a"]],
    ("a", 1),
    {},
    {"a": 1},
    b"a",
    object(),
]
"""Wrong types, numbers past a float, names of thousands of digits, huge host-list ranges."""

values = st.one_of(
    st.sampled_from(HOSTILE),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.lists(st.one_of(st.integers(), st.text(max_size=4), st.none()), max_size=3),
)


def _one_line_error(call: Callable[[], object]) -> None:
    """``call()`` returns, or raises a TopologyError whose message is one line."""
    try:
        call()
    except TopologyError as error:
        assert "\n" not in str(error), str(error)


def _alloc() -> Allocation:
    return Allocation([Host("a", 2, ("r",)), Host("b", 2, ("r",))], [Tier("rack")])


_FILES = tempfile.mkdtemp(prefix="machine-errors-")
HOSTFILE = os.path.join(_FILES, "hosts")
TOPOLOGY_CONF = os.path.join(_FILES, "topology.conf")
TOPOGRAPH = os.path.join(_FILES, "topograph.json")
ALLOCATION = os.path.join(_FILES, "allocation.toml")
Path(HOSTFILE).write_text("n[1-4] slots=4\n")
Path(TOPOLOGY_CONF).write_text(
    "SwitchName=s0 Nodes=n[1-2]\nSwitchName=s1 Nodes=n[3-4]\nSwitchName=s2 Switches=s[0-1]\n"
)
Path(TOPOGRAPH).write_text(
    json.dumps({"instances": [{"id": f"n{i}", "network_layers": ["l"]} for i in range(1, 5)]})
)
Path(ALLOCATION).write_text(
    '[[tiers]]\nname = "rack"\nnvlink = true\n'
    '[[hosts]]\nnames = "n[1-4]"\ngpus = 4\ndomains = { rack = "r1" }\n'
)

CALLS: dict[str, Callable[[Any], object]] = {
    "Tier(name)": lambda v: Tier(v),
    "Tier(bandwidth)": lambda v: Tier("r", bandwidth=v),
    "Tier(latency)": lambda v: Tier("r", latency=v),
    "Tier(nvlink)": lambda v: Tier("r", nvlink=v),
    "Host(name)": lambda v: Host(v, 1),
    "Host(gpus)": lambda v: Host("a", v),
    "Host(domains)": lambda v: Host("a", 1, v),
    "Cluster(gpus_per_node)": lambda v: Cluster(v),
    "Cluster(nodes)": lambda v: Cluster(8, nodes=v),
    "Cluster(nvlink_domain)": lambda v: Cluster(8, nvlink_domain=v),
    "Cluster.node_of": lambda v: Cluster(8).node_of(v),
    "Cluster.domain_of": lambda v: Cluster(8).domain_of(v),
    "Allocation(hosts)": lambda v: Allocation(v),
    "Allocation(tiers)": lambda v: Allocation([Host("a", 1)], v),
    "Allocation.rank_map": lambda v: _alloc().rank_map(v),
    "Allocation.rank_map(order)": lambda v: _alloc().rank_map(4, order=v),
    "Allocation.with_order": lambda v: _alloc().with_order(v),
    "Allocation.tier_index": lambda v: _alloc().tier_index(v),
    "RankMap.location": lambda v: _alloc().rank_map(4).location(v),
    "RankMap.domain_ids": lambda v: _alloc().rank_map(4).domain_ids(v),
    "expand_hostlist": expand_hostlist,
    "compress_hostlist": compress_hostlist,
    "compress_hostlist([v])": lambda v: compress_hostlist([v]),
    "compress_hostlist([v, v+1])": lambda v: compress_hostlist([f"{v}", f"{v}1"]),
    "read_hostfile(path)": read_hostfile,
    "read_hostfile(gpus_per_host)": lambda v: read_hostfile(HOSTFILE, gpus_per_host=v),
    "read_allocation(path)": read_allocation,
    "read_slurm_topology(path)": lambda v: read_slurm_topology(v, gpus_per_host=8),
    "read_slurm_topology(gpus_per_host)": lambda v: read_slurm_topology(
        TOPOLOGY_CONF, gpus_per_host=v
    ),
    "read_slurm_topology(hosts)": lambda v: read_slurm_topology(
        TOPOLOGY_CONF, gpus_per_host=8, hosts=v
    ),
    "read_slurm_topology(plugin)": lambda v: read_slurm_topology(
        TOPOLOGY_CONF, gpus_per_host=8, plugin=v
    ),
    "read_topograph(path)": lambda v: read_topograph(v, gpus_per_host=8),
    "read_topograph(gpus_per_host)": lambda v: read_topograph(TOPOGRAPH, gpus_per_host=v),
    "read_topograph(hosts)": lambda v: read_topograph(TOPOGRAPH, gpus_per_host=8, hosts=v),
    "allocation file: version": lambda v: allocation_from_dict({"version": v, "hosts": []}),
    "allocation file: gpus_per_host": lambda v: allocation_from_dict(
        {"gpus_per_host": v, "hosts": [{"name": "a"}]}
    ),
    "allocation file: tiers": lambda v: allocation_from_dict({"tiers": v, "hosts": []}),
    "allocation file: hosts": lambda v: allocation_from_dict({"hosts": v}),
    "allocation file: tier name": lambda v: allocation_from_dict(
        {"tiers": [{"name": v}], "hosts": [{"name": "a", "gpus": 1}]}
    ),
    "allocation file: tier nvlink": lambda v: allocation_from_dict(
        {"tiers": [{"name": "r", "nvlink": v}], "hosts": [{"name": "a", "gpus": 1}]}
    ),
    "allocation file: tier bandwidth": lambda v: allocation_from_dict(
        {"tiers": [{"name": "r", "bandwidth": v}], "hosts": [{"name": "a", "gpus": 1}]}
    ),
    "allocation file: tier latency": lambda v: allocation_from_dict(
        {"tiers": [{"name": "r", "latency": v}], "hosts": [{"name": "a", "gpus": 1}]}
    ),
    "allocation file: host name": lambda v: allocation_from_dict(
        {"hosts": [{"name": v, "gpus": 1}]}
    ),
    "allocation file: host names": lambda v: allocation_from_dict(
        {"hosts": [{"names": v, "gpus": 1}]}
    ),
    "allocation file: host gpus": lambda v: allocation_from_dict(
        {"hosts": [{"name": "a", "gpus": v}]}
    ),
    "allocation file: host domains": lambda v: allocation_from_dict(
        {"tiers": [{"name": "r"}], "hosts": [{"name": "a", "gpus": 1, "domains": v}]}
    ),
    "allocation file: a domain": lambda v: allocation_from_dict(
        {"tiers": [{"name": "r"}], "hosts": [{"name": "a", "gpus": 1, "domains": {"r": v}}]}
    ),
    "Topograph: document": lambda v: parse_topograph(v, gpus_per_host=8),
    "Topograph: instances": lambda v: parse_topograph({"instances": v}, gpus_per_host=8),
    "Topograph: id": lambda v: parse_topograph({"instances": [{"id": v}]}, gpus_per_host=8),
    "Topograph: network_layers": lambda v: parse_topograph(
        {"instances": [{"id": "a", "network_layers": v}]}, gpus_per_host=8
    ),
    "Topograph: labels": lambda v: parse_topograph(
        {"instances": [{"id": "a", "labels": v}]}, gpus_per_host=8
    ),
    "Topograph: domain label": lambda v: parse_topograph(
        {"instances": [{"id": "a", "labels": {"accelerator.topograph.run/domain": v}}]},
        gpus_per_host=8,
    ),
}
"""Every argument of the public constructors and readers, and every field of the files."""


@given(st.sampled_from(sorted(CALLS)), values)
def test_public_constructors_and_readers_raise_only_one_line_topology_errors(
    call: str, value: object
) -> None:
    """Any value for any argument or file field: a result or a one-line TopologyError."""
    _one_line_error(lambda: CALLS[call](value))


TOKENS = [
    "n1",
    "n[1-4]",
    HUGE_NAME,
    "n[0-99999999999999999999]",
    "n[" + "9" * 5000 + "]",
    "slots=2",
    "slots=" + BIG_TEXT,
    "slots=1e309",
    "slots=-1",
    "slots=\u0663",
    "SLOTS=2",
    "max_slots=4",
    "=",
    "a\x0bb",
    "#",
    "\u2028",
]
"""Words of a hostile hostfile line (host lists, options, numbers past a float)."""

CONF_TOKENS = [
    "SwitchName=s0",
    "SwitchName=s1",
    "Switches=s[0-1]",
    "Nodes=n[1-2]",
    f"Nodes={HUGE_NAME}",
    "Nodes=n[0-99999999999999999999]",
    f"LinkSpeed={BIG_TEXT}",
    "BlockName=b1",
    f"BlockSizes={BIG_TEXT}",
    "BlockSizes=1e309",
    "BlockSizes=2,3",
    "BlockSizes=\u0663",
    "Nodes=",
    "x",
]
"""Words of a hostile topology.conf line."""


def _text(tokens: list[str]) -> st.SearchStrategy[str]:
    line = st.lists(st.sampled_from(tokens), min_size=1, max_size=4).map(" ".join)
    return st.lists(line, min_size=1, max_size=4).map("\n".join)


@given(_text(TOKENS), st.sampled_from([None, 4]))
def test_hostile_hostfiles_raise_only_one_line_topology_errors(
    text: str, gpus_per_host: int | None
) -> None:
    """Any lines of host lists, options and huge numbers: hosts or a one-line TopologyError."""
    _one_line_error(lambda: parse_hostfile(text, gpus_per_host=gpus_per_host))


@given(_text(CONF_TOKENS))
def test_hostile_topology_confs_raise_only_one_line_topology_errors(text: str) -> None:
    """Any lines of switches, blocks, huge host lists and sizes: one-line TopologyErrors only."""
    _one_line_error(lambda: parse_slurm_topology(text, gpus_per_host=8))


REFUSED: dict[str, tuple[Callable[[Any], object], Callable[[object], bool]]] = {
    "Tier(name)": (lambda v: Tier(v), lambda v: isinstance(v, str) and v.strip() == v != ""),
    "Tier(bandwidth)": (
        lambda v: Tier("r", bandwidth=v),
        lambda v: v is None or (type(v) in (int, float) and 0 < v < float("inf")),  # type: ignore[operator]
    ),
    "Host(gpus)": (lambda v: Host("a", v), lambda v: type(v) is int and 1 <= v <= 2**16),
    "Cluster(gpus_per_node)": (lambda v: Cluster(v), lambda v: type(v) is int and 1 <= v <= 2**40),
    "Allocation.with_order": (
        lambda v: _alloc().with_order(v),
        lambda v: isinstance(v, list | tuple) and bool(v) and all(x in ("a", "b") for x in v),
    ),
    "compress_hostlist": (
        compress_hostlist,
        lambda v: isinstance(v, list | tuple) and all(isinstance(x, str) and x for x in v),
    ),
}
"""Arguments with a type: each call and which values it may accept."""


@given(st.sampled_from(sorted(REFUSED)), values)
def test_arguments_of_the_wrong_type_are_refused_not_read(call: str, value: object) -> None:
    """A value outside an argument's type is a TopologyError, never read some other way."""
    function, valid = REFUSED[call]
    if valid(value):
        return
    with pytest.raises(TopologyError):
        function(value)


# -- goldens: the inputs that escaped or were read silently --------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: Tier("r", bandwidth=10**400),
            r"Tier.bandwidth must be a finite number >= 0 or None, got <int of about 401 digits>",
        ),
        (
            lambda: allocation_from_dict(
                {"tiers": [{"name": "r", "latency": 10**400}], "hosts": [{"name": "a", "gpus": 1}]}
            ),
            r"allocation tiers\[0\]: Tier.latency must be a finite number >= 0 or None, got <int",
        ),
        (
            lambda: _alloc().with_order("ab"),  # type: ignore[arg-type]
            r"host order must be a list or tuple of host names, got 'ab' \(str\)",
        ),
        (
            lambda: _alloc().with_order([["a"]]),  # type: ignore[list-item]
            r"host order: host names must be non-empty strings, got \['a'\]",
        ),
        (
            lambda: compress_hostlist("n1"),
            r"compress_hostlist takes host names \(a list\), got 'n1' \(str\); "
            r"for one name write \['n1'\]$",
        ),
        (
            lambda: compress_hostlist(None),  # type: ignore[arg-type]
            r"compress_hostlist takes host names \(a list\), got None \(NoneType\)$",
        ),
        (
            lambda: read_hostfile(None),  # type: ignore[arg-type]
            r"cannot read hostfile None: a path is a string, got None \(NoneType\)",
        ),
        (
            lambda: read_topograph(TOPOGRAPH, gpus_per_host=8, hosts=1.5),  # type: ignore[arg-type]
            r"hosts must be a Slurm host list such as 'n\[1-4\]' or a list of names, got 1.5",
        ),
        (
            lambda: expand_hostlist("n[0-99999999999999999999]"),
            rf"has more than {MAX_HOSTS} hosts",
        ),
        (
            lambda: expand_hostlist("n[0-" + "9" * 5000 + "]"),
            rf"a number of 5000 digits; numbers in brackets have at most {MAX_DIGITS}",
        ),
    ],
)
def test_the_escapes_are_clean_errors(call: Callable[[], object], message: str) -> None:
    """Each input that escaped as TypeError/OverflowError/ValueError names value and fix."""
    with pytest.raises(TopologyError, match=message):
        call()


@pytest.mark.parametrize("second", ["slots=3", "slots=2", "SLOTS=4"])
def test_a_hostfile_line_giving_slots_twice_is_refused_with_its_line(second: str) -> None:
    """``node2 slots=2 slots=3`` is an error naming line 3, not the last value read silently."""
    text = f"# job\nnode1 slots=2\nnode2 slots=2 {second}\n"
    with pytest.raises(
        TopologyError,
        match=rf"hostfile line 3 gives slots twice \('slots=2' and '{second}'\); give one",
    ):
        parse_hostfile(text)


def test_names_with_numbers_past_a_bracket_compress_as_written() -> None:
    """Names whose last number has thousands of digits are written whole and read back."""
    hosts = [HUGE_NAME, "n1", "n2", "n" + "0" * 5000 + "1", "n" + "0" * 5000 + "2"]
    assert expand_hostlist(compress_hostlist(hosts)) == tuple(hosts)


# -- the CLI: exit 2 and one line for every bad argument -----------------------------------------

LAYOUT = ["-w", "16", "--tp", "2"]
BASES = {
    "show": [
        "show",
        *LAYOUT,
        "--slurm-topology",
        TOPOLOGY_CONF,
        "--gpus-per-host",
        "4",
        "--hosts",
        "n[1-4]",
    ],
    "groups": ["groups", "tp", *LAYOUT],
    "rank": ["rank", "3", *LAYOUT, "--gpus-per-node", "4"],
    "check": ["check", *LAYOUT, "--gpus-per-node", "4"],
    "place": ["place", *LAYOUT, "--hostfile", HOSTFILE],
    "simulate": ["simulate", *LAYOUT, "--gpus-per-node", "4"],
    "plan": ["plan", "-w", "16", "--model", "llama-7b", "--gpus-per-node", "8"],
    "transfer": ["transfer", "--from", "tp=2", "--to", "tp=4", "--model", "llama-7b", "-w", "16"],
    "reshape": ["reshape", *LAYOUT, "--gpus-per-node", "4", "--lost-ranks", "3"],
    "completion": ["completion", "bash"],
}
"""A valid command line of each command (each exits 0), into which a bad value is put."""

BAD_ARGUMENTS = ["a\nb", BIG_TEXT, "-1", "x", "", HUGE_NAME, "tp=" + "1" * 5000, "1e309"]
"""Newlines, numbers past a float (10**400, 1e309), -1, 'x', empty, 5,000 digits."""


def invoke(argv: list[str]) -> tuple[int, str]:
    """Run ``topology ARGV`` in-process; return the exit code and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, err.getvalue()


def _options(command: str) -> list[argparse.Action]:
    parser = build_parser()._subparsers
    assert parser is not None
    commands: Any = parser._group_actions[0].choices
    return [
        action
        for action in commands[command]._actions
        if action.nargs != 0 and not isinstance(action, argparse._HelpAction)
    ]


def _with(base: list[str], action: argparse.Action, value: str) -> list[str]:
    """``base`` with ``value`` for ``action``: in place of its value there, else added."""
    argv = list(base)
    if not action.option_strings:
        return [argv[0], value, *argv[2:]]
    for index, word in enumerate(argv):
        if word in action.option_strings:
            argv[index + 1] = value
            return argv
    return [*argv, action.option_strings[0], value]


def _assert_one_line(code: int, err: str, argv: list[str]) -> None:
    lines = err.splitlines()
    assert code in (0, 1, 2), (argv[:3], err)
    if code == 2:
        assert len(lines) == 1 and err.endswith("\n"), (argv[:3], err)
        assert len(lines[0]) <= 600, (argv[:3], lines[0][:200])


@pytest.mark.parametrize("command", sorted(BASES))
def test_bad_values_for_every_option_exit_2_with_one_line(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each option of each command given each bad argument: never an internal error; exit 2
    with one short line on stderr (an int option always refuses them)."""
    monkeypatch.chdir(tmp_path)  # --svg, --html, --write-hostfile may write a file named "x"
    assert invoke(BASES[command])[0] == 0
    for action in _options(command):
        for value in BAD_ARGUMENTS:
            argv = _with(BASES[command], action, value)
            code, err = invoke(argv)
            _assert_one_line(code, err, argv)
            if action.type is not None and value != "tp=" + "1" * 5000:
                assert code == 2, (argv[:3], action.dest, value[:20])


@pytest.mark.parametrize("command", sorted(BASES))
@pytest.mark.parametrize("word", ["--bogus\nx", "bogus\nx", "--" + "x" * 5000, "x\u2028y"])
def test_unknown_arguments_exit_2_with_one_line(command: str, word: str) -> None:
    """An unknown argument holding a newline, a line separator or 5,000 characters: one line
    on stderr that shows the newline escaped and the long word shortened."""
    code, err = invoke([*BASES[command], word])
    _assert_one_line(code, err, [command])
    assert code == 2
    if "\n" in word:
        assert word.replace("\n", "\\n") in err
    assert len(err) < 300


@pytest.mark.parametrize("word", ["bogus\nx", "x" * 5000])
def test_an_unknown_command_is_one_line(word: str) -> None:
    """A command name holding a newline or 5,000 characters: exit 2, one short line."""
    code, err = invoke([word])
    assert code == 2 and len(err.splitlines()) == 1 and len(err) < 400, err[:200]
