"""Allocation readers and host lists: round trips from drawn values, and every message in full.

Laws first: a host list rendered from drawn entries expands to what a tiny brute-force expander
(``itertools.product`` over the bracket groups) says; a hostfile, a ``topology.conf`` tree, a
Topograph document and our own file written from a drawn allocation read back as that
allocation. Then golden cases from Slurm's ``topology.conf(5)`` and host-list syntax. Then each
documented rejection, matched against the whole message (worked out by hand from the format
each reader documents), so a message that loses its label, line or value fails here.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Allocation, Host, Tier, TopologyError
from topology._machine.hostlist import (
    MAX_HOSTS,
    compress_hostlist,
    expand_hostlist,
    natural_key,
    slurm_key,
)
from topology._machine.readers.hostfile import parse_hostfile, read_hostfile
from topology._machine.readers.native_format import allocation_from_dict, read_allocation
from topology._machine.readers.slurm_topology import parse_slurm_topology, read_slurm_topology
from topology._machine.readers.topograph import parse_topograph, read_topograph


def exactly(message: str) -> Any:
    """pytest.raises for a TopologyError whose whole message is ``message``."""
    return pytest.raises(TopologyError, match=f"^{re.escape(message)}$")


def table(alloc: Allocation) -> list[tuple[str, int, tuple[str | None, ...]]]:
    """Each host as (name, gpus, domains)."""
    return [(h.name, h.gpus, h.domains) for h in alloc.hosts]


# ---- host lists: a brute-force expander ----

Part = tuple[int, int | None, int]  # lo, hi (None: a single number), width lo is written at
texts = st.text(st.sampled_from("abx-._"), max_size=3)
parts = st.tuples(st.integers(0, 30), st.one_of(st.none(), st.integers(0, 12)), st.integers(1, 3))


@st.composite
def entries(draw: st.DrawFn) -> tuple[list[str], list[list[Part]], str]:
    """One entry: texts around bracket groups, ``heads[i]`` before group ``i``, then a tail."""
    groups = draw(st.lists(st.lists(parts, min_size=1, max_size=3), max_size=3))
    heads = [draw(texts) for _ in groups]
    tail = draw(texts)
    if not groups and not tail:
        tail = "h"
    return (
        heads,
        [[(lo, None if hi is None else lo + hi, w) for lo, hi, w in g] for g in groups],
        tail,
    )


def render(heads: list[str], groups: list[list[Part]], tail: str) -> str:
    """The entry written in Slurm's syntax."""
    out = ""
    for head, group in zip(heads, groups, strict=True):
        written = [f"{lo:0{w}d}" if hi is None else f"{lo:0{w}d}-{hi}" for lo, hi, w in group]
        out += f"{head}[{','.join(written)}]"
    return out + tail


def brute_expand(heads: list[str], groups: list[list[Part]], tail: str) -> list[str]:
    """Every name: one number per group, first group slowest, each as wide as its lo is written."""
    choices = []
    for head, group in zip(heads, groups, strict=True):
        numbers = []
        for lo, hi, w in group:
            width = len(f"{lo:0{w}d}")
            numbers += [f"{n:0{width}d}" for n in range(lo, (lo if hi is None else hi) + 1)]
        choices.append([head + n for n in numbers])
    return ["".join(pick) + tail for pick in itertools.product(*choices)]


@settings(max_examples=60)
@given(
    st.lists(entries(), min_size=1, max_size=4),
    st.lists(st.sampled_from([",", " ", "\t", "\n", ", ", ",,", " \r\n "]), min_size=4, max_size=4),
)
def test_expand_matches_a_brute_force_expander(
    drawn: list[tuple[list[str], list[list[Part]], str]], separators: list[str]
) -> None:
    """Entries joined by any separators expand to the product of their bracket groups."""
    text = "".join(render(*e) + sep for e, sep in zip(drawn, separators, strict=False))
    expected = [name for e in drawn for name in brute_expand(*e)]
    assert expand_hostlist(text) == tuple(expected)
    assert expand_hostlist(compress_hostlist(expected)) == tuple(expected)


def test_host_lists_up_to_the_limit_expand() -> None:
    """Exactly MAX_HOSTS (2**20) hosts from one range is allowed."""
    assert MAX_HOSTS == 1 << 20
    hosts = expand_hostlist("n[1-1048576]")
    assert (len(hosts), hosts[0], hosts[-1]) == (MAX_HOSTS, "n1", "n1048576")
    assert expand_hostlist("n[1048576-1048576]") == ("n1048576",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("n[1-1048576],x", "host list 'n[1-1048576],x' has more than 1048576 hosts"),
        ("n[0-1048576]", "host list 'n[0-1048576]' has more than 1048576 hosts"),
        ("a[0-1024]b[1-1024]", "host list 'a[0-1024]b[1-1024]' has more than 1048576 hosts"),
        ("n[[1]]", "host list 'n[[1]]' nests brackets; write node[1-4]"),
        ("n1]", "host list 'n1]' has ']' without '['"),
        ("n[1", "host list 'n[1' has '[' without ']'"),
        (
            "n[1,x]",
            "host list 'n[1,x]' has range 'x'; a range is a number or lo-hi with digits only, "
            "e.g. [1-4,7]",
        ),
        ("n[1,5-3]", "host list 'n[1,5-3]' has range '5-3' with 5 > 3; write 3-5"),
        ("n1,m[2-1]", "host list 'n1,m[2-1]' has range '2-1' with 2 > 1; write 1-2"),
        (["n1"], "a host list must be a string, got ['n1']"),
    ],
)
def test_host_list_messages(text: str, message: str) -> None:
    """Each malformed host list is named in full, with the range and the rule."""
    with exactly(message):
        expand_hostlist(text)


def test_compress_message() -> None:
    """A name the syntax cannot carry is named with the rule."""
    with exactly(
        "host name 'a b' cannot be written in a host list; names must be non-empty and hold "
        "no '[', ']', ',' or blanks"
    ):
        compress_hostlist(["n1", "a b"])


@given(
    st.text(st.sampled_from("ab-"), max_size=3),
    st.integers(0, 10**6),
    st.text(st.sampled_from("ab-."), min_size=1, max_size=3),
)
def test_natural_key_puts_a_digit_run_before_text(prefix: str, number: int, text: str) -> None:
    """At the same place, a run of digits sorts before text (documented in natural_key)."""
    assert natural_key(f"{prefix}{number}") < natural_key(f"{prefix}{text}")


def test_slurm_key_compares_the_name_before_its_trailing_digits() -> None:
    """Only the trailing digits are the number: aX1 has prefix aX, so a2 sorts first."""
    assert sorted(["aX1", "a2", "a", "b0"], key=slurm_key) == ["a", "a2", "aX1", "b0"]


# ---- hostfile ----

host_names = st.lists(
    st.tuples(st.sampled_from(["node", "gpu-", "x"]), st.integers(0, 99)), max_size=8, unique=True
).map(lambda pairs: [f"{p}{n}" for p, n in pairs])


@settings(max_examples=40)
@given(
    host_names.filter(bool),
    st.data(),
    st.one_of(st.none(), st.integers(1, 8)),
)
def test_hostfile_reads_back_what_was_written(
    names: list[str], data: st.DataObject, default: int | None
) -> None:
    """A hostfile written from drawn hosts and slots (comments, blanks, case) reads back."""
    lines, expected = ["# drawn"], []
    for name in names:
        slots = data.draw(
            st.one_of(st.none(), st.integers(1, 1 << 16)) if default else st.integers(1, 9)
        )
        key = data.draw(st.sampled_from(["slots", "SLOTS", "Slots"]))
        option = "" if slots is None else f" {key}={slots}"
        comment = data.draw(st.sampled_from(["", " # a # b", "#", "\t# x=y"]))
        lines += [f"  {name}{option}{comment}", data.draw(st.sampled_from(["", "   ", "# c"]))]
        expected.append((name, default if slots is None else slots, ()))
    assert table(parse_hostfile("\n".join(lines), gpus_per_host=default)) == expected


def test_hostfile_host_lists_share_the_line_slots() -> None:
    """A host list on one line gives every host that line's slots."""
    alloc = parse_hostfile("n[1-2] slots=3\nm[08-09]", gpus_per_host=5)
    assert table(alloc) == [("n1", 3, ()), ("n2", 3, ()), ("m08", 5, ()), ("m09", 5, ())]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "hostfile names no hosts; write one host per line"),
        (
            "a slots=1\nb",
            "hostfile line 2: host 'b' has no slots=N and no gpus_per_host was given; "
            "add slots=N or pass gpus_per_host",
        ),
        (
            "a ranks=2",
            "hostfile line 1 has 'ranks=2'; after the host only slots=N may follow, "
            "e.g. node1 slots=8",
        ),
        (
            "a slots=2=2",
            "hostfile line 1 has slots=2=2; slots must be a positive int in plain digits 0-9",
        ),
        (
            "a slots=65537",
            "hostfile line 1 has slots=65537; slots must be at most 65536 (2**16), more GPUs than "
            "any host has, got 65537",
        ),
        (
            "a slots=-1",
            "hostfile line 1 has slots=-1; slots must be a positive int in plain digits 0-9",
        ),
        ("k=v", "hostfile line 1 starts with 'k=v'; give the host name first"),
        (
            "a[1-2] slots=1\n\nb slots=1\na2 slots=1",
            "hostfile line 4 lists host 'a2' again (first on line 1); "
            "list each host once with its slots",
        ),
    ],
)
def test_hostfile_messages(text: str, message: str) -> None:
    """Each malformed hostfile is named in full."""
    with exactly(message):
        parse_hostfile(text)


def test_hostfile_comments_start_at_the_first_hash() -> None:
    """Everything after the first '#' is a comment, later '#'s included."""
    assert table(parse_hostfile("a slots=2 # x # y z")) == [("a", 2, ())]


def test_hostfile_slots_up_to_the_gpu_limit() -> None:
    """slots=65536 (MAX_GPUS_PER_HOST) is the largest allowed."""
    assert parse_hostfile("a slots=65536").hosts[0].gpus == 65536


def test_read_hostfile_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """read_hostfile passes gpus_per_host on and names the file in every message."""
    monkeypatch.chdir(tmp_path)
    Path("hosts").write_text("a\nb slots=2\n")
    assert table(read_hostfile("hosts", gpus_per_host=3)) == [("a", 3, ()), ("b", 2, ())]
    with exactly(
        "hostfile 'hosts' line 1: host 'a' has no slots=N and no gpus_per_host was given; "
        "add slots=N or pass gpus_per_host"
    ):
        read_hostfile("hosts")
    with exactly("cannot read hostfile 'nope': No such file or directory"):
        read_hostfile("nope", gpus_per_host=1)
    Path("latin").write_bytes(b"a\xe9b")
    with exactly("hostfile 'latin' is not UTF-8 text (invalid continuation byte at byte 1)"):
        read_hostfile("latin", gpus_per_host=1)


# ---- Slurm topology.conf, tree ----


@st.composite
def trees(draw: st.DrawFn) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Leaf switches with their nodes and each leaf's spine (two levels, every leaf covered)."""
    names = draw(host_names.filter(bool))
    leaves = draw(st.integers(1, len(names)))
    cuts = sorted(
        draw(st.lists(st.integers(1, len(names)), min_size=leaves - 1, max_size=leaves - 1))
    )
    bounds = [0, *cuts, len(names)]
    members = {f"leaf{i}": names[bounds[i] : bounds[i + 1]] for i in range(leaves)}
    spine = {leaf: draw(st.sampled_from(["spA", "spB"])) for leaf in members}
    return members, spine


@settings(max_examples=40)
@given(trees(), st.data())
def test_tree_reads_back_the_drawn_switches(
    drawn: tuple[dict[str, list[str]], dict[str, str]], data: st.DataObject
) -> None:
    """Every node is in its leaf and its leaf's spine; hosts come in the order given."""
    members, spine = drawn
    lines = [
        f"SwitchName={leaf}" + (f" Nodes={compress_hostlist(ns)}" if ns else "")
        for leaf, ns in members.items()
    ]
    for parent in sorted(set(spine.values())):
        kids = [leaf for leaf in members if spine[leaf] == parent]
        lines.append(f"switchname={parent} SWITCHES={','.join(kids)} LinkSpeed=100 # up")
    text = "\n".join(data.draw(st.permutations(lines)))
    expected = {n: (leaf, spine[leaf]) for leaf, ns in members.items() for n in ns}
    order = data.draw(st.permutations(sorted(expected)))
    alloc = parse_slurm_topology(text, gpus_per_host=2, hosts=list(order))
    assert [t.name for t in alloc.tiers] == ["leaf", "spine"]
    assert table(alloc) == [(n, 2, expected[n]) for n in order]


def test_deep_trees_name_tiers_level3_and_up() -> None:
    """A chain of five switches gives tiers leaf, spine, core, level3, level4."""
    text = "SwitchName=s0 Nodes=a\n" + "\n".join(
        f"SwitchName=s{i} Switches=s{i - 1}" for i in range(1, 5)
    )
    alloc = parse_slurm_topology(text, gpus_per_host=1)
    assert [t.name for t in alloc.tiers] == ["leaf", "spine", "core", "level3", "level4"]
    assert table(alloc) == [("a", 1, ("s0", "s1", "s2", "s3", "s4"))]


def test_a_shallow_tree_beside_a_deep_one_stays_in_its_root() -> None:
    """A leaf with no parent is its own domain at every higher tier (the root of its tree)."""
    text = "SwitchName=l0 Nodes=a\nSwitchName=top Switches=l0\nSwitchName=lone Nodes=b"
    alloc = parse_slurm_topology(text, gpus_per_host=1)
    assert table(alloc) == [("a", 1, ("l0", "top")), ("b", 1, ("lone", "lone"))]


def test_slurm_fields_keep_equals_signs_and_lose_quotes() -> None:
    """Name=Value splits at the first '='; quotes around a value are dropped, X kept. A switch
    name keeps its '='; a host name with one breaks the host-name rule (Host applies it)."""
    text = "SwitchName=\"Xs\" Nodes='X[1-2]'\nSwitchName=t=u Nodes=y"
    alloc = parse_slurm_topology(text, gpus_per_host=1)
    assert table(alloc) == [("X1", 1, ("Xs",)), ("X2", 1, ("Xs",)), ("y", 1, ("t=u",))]
    with pytest.raises(TopologyError, match=r"host 'y=z' holds '=', which a hostfile line reads"):
        parse_slurm_topology("SwitchName=t Nodes=y=z", gpus_per_host=1)


def test_slurm_hosts_may_be_a_sequence() -> None:
    """hosts as a list of names is taken as given, not parsed as a host list."""
    alloc = parse_slurm_topology("SwitchName=s Nodes=n[1-2]", gpus_per_host=1, hosts=["n2", "q"])
    assert table(alloc) == [("n2", 1, ("s",)), ("q", 1, (None,))]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SwitchName=s Nodes=", "topology.conf line 1 has 'Nodes='; every field is Name=Value"),
        ("SwitchName=s nodes=a NODES=b", "topology.conf line 1 gives nodes twice"),
        (
            "SwitchName=s Blocks=a",
            "topology.conf line 1 has blocks, which this line cannot take; "
            "valid: linkspeed, nodes, switches, switchname",
        ),
        (
            "# c\nSwitchName=s Nodes=a\n\nSwitchName=s Nodes=b",
            "topology.conf line 4 defines switch 's' again (first on line 2)",
        ),
        (
            "SwitchName=s Nodes=a Switches=t",
            "topology.conf line 1: switch 's' has both Nodes and Switches; "
            "a leaf switch has Nodes, a higher one Switches",
        ),
        (
            "\nSwitchName=s Switches=t",
            "topology.conf line 2: switch 's' lists switch 't', which no SwitchName line defines",
        ),
        (
            "SwitchName=a Nodes=x\nSwitchName=p Switches=a\nSwitchName=q Switches=a",
            "topology.conf: switch 'a' is a child of both 'p' and 'q'; give each switch one parent",
        ),
        (
            "SwitchName=x Nodes=n\nSwitchName=b Switches=c\nSwitchName=c Switches=b",
            "topology.conf: switches form a loop (b -> c -> b)",
        ),
        (
            "SwitchName=a Nodes=x\n#\nSwitchName=b Nodes=x",
            "topology.conf line 3: node 'x' is under switch 'a' too; "
            "give each node one leaf switch",
        ),
        ("SwitchName=a", "topology.conf names no nodes; add Nodes= to its lines"),
        ("", "topology.conf has no SwitchName lines for the tree plugin"),
        (
            "RingName=r Nodes=a=b",
            "topology.conf line 1 starts with 'RingName'; lines start with SwitchName= (tree), "
            "BlockName= or BlockSizes= (block)",
        ),
        (
            "SwitchName=s Nodes=a\nBlockName=b Nodes=a",
            "topology.conf has both SwitchName and BlockName lines; pass plugin='tree' or 'block'",
        ),
        ("SwitchName=s Nodes=a[2", "host list 'a[2' has '[' without ']'"),
    ],
)
def test_tree_messages(text: str, message: str) -> None:
    """Each malformed tree topology.conf is named in full: label, line, value, rule."""
    with exactly(message):
        parse_slurm_topology(text, gpus_per_host=1)


# ---- Slurm topology.conf, block ----


def test_block_defaults_to_nvlink_and_skips_empty_blocks() -> None:
    """Tier block is NVLink unless told; a block without Nodes holds no host but counts."""
    text = "BlockName=e\nBlockName=f Nodes=x\nBlockName=g Nodes=y\nBlockSizes=1,2"
    alloc = parse_slurm_topology(text, gpus_per_host=1)
    assert [(t.name, t.nvlink) for t in alloc.tiers] == [("block", True), ("block2", False)]
    assert table(alloc) == [("x", 1, ("f", "e..f")), ("y", 1, ("g", "g..g"))]


def test_block_sizes_by_powers_of_two() -> None:
    """BlockSizes=2,4,8 pairs blocks, then pairs of pairs (worked out by hand for 5 blocks)."""
    text = "\n".join(f"BlockName=b{i} Nodes=n{i}" for i in range(5)) + "\nBlockSizes=2,4,8"
    alloc = parse_slurm_topology(text, gpus_per_host=1)
    assert [t.name for t in alloc.tiers] == ["block", "block4", "block8"]
    assert [h.domains for h in alloc.hosts] == [
        ("b0", "b0..b1", "b0..b3"),
        ("b1", "b0..b1", "b0..b3"),
        ("b2", "b2..b3", "b0..b3"),
        ("b3", "b2..b3", "b0..b3"),
        ("b4", "b4..b4", "b4..b4"),
    ]


@pytest.mark.parametrize(
    ("text", "plugin", "message"),
    [
        (
            "BlockName=b Nodes=x\n\nBlockSizes=0",
            None,
            "topology.conf line 3 has BlockSizes=0; give positive ints, e.g. 18,36",
        ),
        (
            "BlockName=b Nodes=x\n\nBlockSizes=4,12",
            None,
            "topology.conf line 3 has BlockSizes=4,12; each size after the base 4 must be 4 "
            "times a power of two and larger than the one before (12 is not)",
        ),
        (
            "BlockName=b Nodes=x\nBlockSizes=4 nodes=x",
            None,
            "topology.conf line 2 has nodes, which this line cannot take; valid: blocksizes",
        ),
        (
            "BlockName=b Switches=x",
            None,
            "topology.conf line 1 has switches, which this line cannot take; "
            "valid: blockname, nodes",
        ),
        (
            "BlockName=b Nodes=x\n\nBlockName=b Nodes=y",
            None,
            "topology.conf line 3 defines block 'b' again (first on line 1)",
        ),
        (
            "BlockName=b Nodes=x\n\nBlockName=c Nodes=x",
            None,
            "topology.conf line 3: node 'x' is in block 'b' too; give each node one block",
        ),
        (
            "BlockName=b Nodes=x\nBlockSizes=1\nblocksizes=1",
            None,
            "topology.conf line 3 gives BlockSizes a second time",
        ),
        (
            "SwitchName=s Nodes=x",
            "block",
            "topology.conf has no BlockName lines for the block plugin",
        ),
        ("SwitchName=s Nodes=x", "ring", "plugin must be 'tree', 'block' or None, got 'ring'"),
    ],
)
def test_block_messages(text: str, plugin: Any, message: str) -> None:
    """Each malformed block topology.conf is named in full."""
    with exactly(message):
        parse_slurm_topology(text, gpus_per_host=1, plugin=plugin)


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        ("", "topology.conf: the host list is empty; name the job's hosts"),
        (["a", " "], "topology.conf: host names must be non-empty strings, got ' '"),
        (["a", 3], "topology.conf: host names must be non-empty strings, got 3"),
        (["a", "b", "a"], "topology.conf: host 'a' is listed twice; list each host once"),
    ],
)
def test_selected_host_messages(hosts: Any, message: str) -> None:
    """A bad job host list is named with the reader's label."""
    with exactly(message):
        parse_slurm_topology("SwitchName=s Nodes=a", gpus_per_host=1, hosts=hosts)


def test_read_slurm_topology_passes_every_argument(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """read_slurm_topology honours plugin, block_nvlink and hosts, and names the file."""
    monkeypatch.chdir(tmp_path)
    Path("topo.conf").write_text("SwitchName=s Nodes=a[1-2]\nBlockName=b Nodes=a[1-2]\n")
    alloc = read_slurm_topology(
        "topo.conf", gpus_per_host=2, hosts="a2", plugin="block", block_nvlink=False
    )
    assert [(t.name, t.nvlink) for t in alloc.tiers] == [("block", False)]
    assert table(alloc) == [("a2", 2, ("b",))]
    assert table(read_slurm_topology("topo.conf", gpus_per_host=1, plugin="tree")) == [
        ("a1", 1, ("s",)),
        ("a2", 1, ("s",)),
    ]
    with exactly(
        "topology.conf 'topo.conf' has both SwitchName and BlockName lines; "
        "pass plugin='tree' or 'block'"
    ):
        read_slurm_topology("topo.conf", gpus_per_host=1)
    with exactly("cannot read topology.conf 'nope': No such file or directory"):
        read_slurm_topology("nope", gpus_per_host=1)


# ---- Topograph ----

LABEL = "accelerator.topograph.run/domain"


@settings(max_examples=40)
@given(
    host_names.filter(bool),
    st.data(),
)
def test_topograph_reads_back_the_drawn_instances(names: list[str], data: st.DataObject) -> None:
    """Each instance gets its NVLink label (if any instance has one) and its layers, padded."""
    instances, layers_of, domain_of = [], {}, {}
    for name in names:
        layers = data.draw(st.lists(st.sampled_from(["l1", "l2", "s1", "c1", "x"]), max_size=5))
        domain = data.draw(st.one_of(st.none(), st.sampled_from(["nvl1", "nvl2"])))
        item: dict[str, Any] = {"id": name, "extra": 1}
        if bool(layers) or data.draw(st.booleans()):
            item["network_layers"] = layers
        if domain is not None:
            item["labels"] = {LABEL: domain, "other": "y"}
        instances.append(item)
        layers_of[name], domain_of[name] = layers, domain
    alloc = parse_topograph({"instances": instances}, gpus_per_host=3)
    depth = max(len(x) for x in layers_of.values())
    nvlink = any(d is not None for d in domain_of.values())
    assert [t.nvlink for t in alloc.tiers] == [True] * nvlink + [False] * depth
    for host in alloc.hosts:
        padded = (*layers_of[host.name], *[None] * (depth - len(layers_of[host.name])))
        assert host.domains == ((domain_of[host.name],) if nvlink else ()) + padded
    assert [h.name for h in alloc.hosts] == names


def test_topograph_deep_layers_are_level3_and_up() -> None:
    """Five layers give leaf, spine, core, level3, level4; null layers are unknown."""
    data = {
        "instances": [
            {"id": "a", "network_layers": ["l", "", "c", "d", "e"]},
            {"id": "b", "network_layers": None},
        ]
    }
    alloc = parse_topograph(data, gpus_per_host=1)
    assert [t.name for t in alloc.tiers] == ["leaf", "spine", "core", "level3", "level4"]
    assert table(alloc) == [("a", 1, ("l", None, "c", "d", "e")), ("b", 1, (None,) * 5)]


@pytest.mark.parametrize(
    ("data", "hosts", "message"),
    [
        ({}, None, "Topograph JSON must be an object with a non-empty list 'instances'"),
        (
            {"instances": ["a"]},
            None,
            "Topograph JSON instances[0] must be an object with id and network_layers",
        ),
        (
            {"instances": [{"id": "a"}, {"id": 5}]},
            None,
            "Topograph JSON instances[1] has id 5; an id is a non-empty string",
        ),
        (
            {"instances": [{"id": "a", "network_layers": ["l", 2]}]},
            None,
            "Topograph JSON instances[0] (a) has network_layers ['l', 2]; "
            "give a list of switch names",
        ),
        (
            {"instances": [{"id": "a", "labels": "x"}]},
            None,
            "Topograph JSON instances[0] (a) has labels 'x'; give an object",
        ),
        (
            {"instances": [{"id": "a", "labels": {LABEL: 1}}]},
            None,
            f"Topograph JSON instances[0] (a) has {LABEL} 1; give a string",
        ),
        (
            {"instances": [{"id": "a"}]},
            "",
            "Topograph JSON: the host list is empty; name the job's hosts",
        ),
        (
            {"instances": [{"id": "a"}]},
            ["a", "a"],
            "Topograph JSON: host 'a' is listed twice; list each host once",
        ),
    ],
)
def test_topograph_messages(data: object, hosts: Any, message: str) -> None:
    """Each malformed Topograph document is named in full."""
    with exactly(message):
        parse_topograph(data, gpus_per_host=1, hosts=hosts)


def test_topograph_gpus_message() -> None:
    """A bad gpus_per_host is named as gpus_per_host."""
    with exactly("gpus_per_host must be a positive int, got 0 (int)"):
        parse_topograph({"instances": [{"id": "a"}]}, gpus_per_host=0)


def test_read_topograph_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """read_topograph passes hosts on and names the file in its messages."""
    monkeypatch.chdir(tmp_path)
    Path("t.json").write_text(json.dumps({"instances": [{"id": "a"}, {"id": "b"}]}))
    assert [h.name for h in read_topograph("t.json", gpus_per_host=1, hosts="b").hosts] == ["b"]
    Path("dup.json").write_text(json.dumps({"instances": [{"id": "a"}, {"id": "a"}]}))
    with exactly("Topograph JSON 'dup.json' lists instance 'a' twice"):
        read_topograph("dup.json", gpus_per_host=1)
    with exactly("cannot read Topograph JSON 'nope': No such file or directory"):
        read_topograph("nope", gpus_per_host=1)


# ---- our allocation file ----

tiers_drawn = st.lists(
    st.tuples(
        st.booleans(),
        st.one_of(st.none(), st.floats(1.0, 1e12)),
        st.one_of(st.none(), st.floats(1e-9, 1.0), st.integers(1, 5)),
    ),
    max_size=3,
).map(
    lambda ts: tuple(
        Tier(f"t{i}", nvlink=n, bandwidth=b, latency=None if lat is None else float(lat))
        for i, (n, b, lat) in enumerate(ts)
    )
)


@st.composite
def allocations(draw: st.DrawFn) -> Allocation:
    """Small allocations with any tiers and any known or unknown domains."""
    tiers = draw(tiers_drawn)
    names = draw(host_names.filter(bool))
    domain = st.one_of(st.none(), st.sampled_from(["d1", "d2", "X"]))
    hosts = [Host(n, draw(st.integers(1, 9)), tuple(draw(domain) for _ in tiers)) for n in names]
    return Allocation(tuple(hosts), tiers)


def as_document(alloc: Allocation, data: st.DataObject) -> dict[str, Any]:
    """Our file format for ``alloc``, optional keys left out at random."""
    document: dict[str, Any] = {}
    if data.draw(st.booleans()):
        document["version"] = 1
    if bool(alloc.tiers) or data.draw(st.booleans()):
        document["tiers"] = []
        for tier in alloc.tiers:
            item: dict[str, Any] = {"name": tier.name}
            if tier.nvlink or data.draw(st.booleans()):
                item["nvlink"] = tier.nvlink
            for key in ("bandwidth", "latency"):
                if getattr(tier, key) is not None:
                    item[key] = getattr(tier, key)
            document["tiers"].append(item)
    default = data.draw(st.sampled_from([None, alloc.hosts[0].gpus]))
    if default is not None:
        document["gpus_per_host"] = default
    document["hosts"] = []
    for host in alloc.hosts:
        item = {data.draw(st.sampled_from(["name", "names"])): host.name}
        if host.gpus != default:
            item["gpus"] = host.gpus
        domains = {t.name: d for t, d in zip(alloc.tiers, host.domains, strict=True) if d}
        if bool(domains) or data.draw(st.booleans()):
            item["domains"] = domains
        document["hosts"].append(item)
    return document


@settings(max_examples=40)
@given(allocations(), st.data())
def test_our_file_reads_back_the_drawn_allocation(alloc: Allocation, data: st.DataObject) -> None:
    """A document written from a drawn allocation, in memory, reads back as that allocation."""
    assert allocation_from_dict(as_document(alloc, data)) == alloc


def toml_value(value: object) -> str:
    """A TOML literal for a str, bool, int or float."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def to_toml(document: dict[str, Any]) -> str:
    """Our format written as TOML (top-level scalars, then arrays of tables)."""
    out = [f"{k} = {toml_value(v)}" for k, v in document.items() if not isinstance(v, list)]
    for key in ("tiers", "hosts"):
        for item in document.get(key, []):
            out.append(f"[[{key}]]")
            for k, v in item.items():
                if isinstance(v, dict):
                    inner = ", ".join(f"{dk} = {toml_value(dv)}" for dk, dv in v.items())
                    out.append(f"{k} = {{ {inner} }}")
                else:
                    out.append(f"{k} = {toml_value(v)}")
    return "\n".join(out) + "\n"


@settings(max_examples=20)
@given(alloc=allocations(), data=st.data())
def test_our_files_read_back_from_disk(
    alloc: Allocation, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The same document as a .json and a .TOML file reads back as the drawn allocation."""
    folder = tmp_path_factory.mktemp("alloc")
    document = as_document(alloc, data)
    (folder / "a.json").write_text(json.dumps(document))
    (folder / "a.TOML").write_text(to_toml(document))
    assert read_allocation(str(folder / "a.json")) == alloc
    assert read_allocation(str(folder / "a.TOML")) == alloc


BASE: dict[str, Any] = {"tiers": [{"name": "rack"}], "hosts": [{"name": "a", "gpus": 4}]}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": True}, "allocation has version True; this reader knows 1"),
        ({"version": 1.0}, "allocation has version 1.0; this reader knows 1"),
        ({"tiers": {}}, "allocation tiers must be a list (array of tables), got {}"),
        ({"tiers": [3]}, "allocation tiers[0] must be a table (object), got 3"),
        (
            {"tiers": [{"name": "r", "nvlink": "yes"}]},
            "allocation tiers[0].nvlink must be true or false, got 'yes'",
        ),
        (
            {"tiers": [{"name": "r", "bandwidth": True}]},
            "allocation tiers[0].bandwidth must be a number, got True",
        ),
        (
            {"tiers": [{"name": "r", "latency": "1us"}]},
            "allocation tiers[0].latency must be a number, got '1us'",
        ),
        ({"hosts": ["a"]}, "allocation hosts[0] must be a table (object), got 'a'"),
        ({"hosts": [{"name": 5, "gpus": 1}]}, "allocation hosts[0].name must be a string, got 5"),
        (
            {"hosts": [{"names": ["a"], "gpus": 1}]},
            'allocation hosts[0].names must be a host list string such as "n[1-4]"',
        ),
        (
            {
                "hosts": [
                    {"name": "a", "gpus": 1},
                    {"name": "b", "gpus": 1, "domains": {"rack": ""}},
                ]
            },
            "allocation hosts[1].domains.rack must be a non-empty string, got ''",
        ),
        (
            {"hosts": [{"name": "a", "gpus": 1, "oops": 1}]},
            "allocation hosts[0] has unknown key 'oops'; valid: domains, gpus, name, names",
        ),
        ({"hosts": []}, "allocation has no hosts; add [[hosts]] tables"),
        ({"hosts": None}, "allocation hosts must be a list (array of tables), got None"),
        (
            {"hosts": [{"names": "a,b", "gpus": 1}, {"name": "a", "gpus": 2}]},
            "allocation: host 'a' is listed twice (again at position 2); "
            "list each host once with its GPU count",
        ),
    ],
)
def test_our_file_messages(change: dict[str, Any], message: str) -> None:
    """Each malformed allocation file is named in full: label, path to the key, value."""
    with exactly(message):
        allocation_from_dict({**BASE, **change})


def test_our_file_without_hosts_or_tiers() -> None:
    """No hosts key is an error; no tiers key means no tiers."""
    with exactly("allocation has no hosts; add [[hosts]] tables"):
        allocation_from_dict({"tiers": []})
    assert allocation_from_dict({"hosts": [{"name": "a", "gpus": 2}]}) == Allocation(
        (Host("a", 2),)
    )


def test_our_file_host_errors_are_prefixed() -> None:
    """A Host the library refuses is named with the file's path to it."""
    try:
        Host(" a", 1)
    except TopologyError as error:
        inner = str(error)
    with exactly(f"allocation hosts[0]: {inner}"):
        allocation_from_dict({"hosts": [{"name": " a", "gpus": 1}]})


def test_read_allocation_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """read_allocation names the file in the messages of the document it reads."""
    monkeypatch.chdir(tmp_path)
    Path("a.json").write_text(json.dumps({"hosts": [{"name": "a"}]}))
    with exactly(
        "allocation file 'a.json' hosts[0] has no gpus and the file no gpus_per_host; give either"
    ):
        read_allocation("a.json")


# ---- Allocation and RankMap text forms ----


def test_allocation_repr_golden() -> None:
    """repr counts hosts and GPUs and names the tiers, or says there are none."""
    two = Allocation(
        (Host("a", 2, ("r", "l")), Host("b", 4, ("r", "l"))), (Tier("rack"), Tier("leaf"))
    )
    assert repr(two) == "<Allocation of 2 hosts, 6 GPUs; tiers: rack, leaf>"
    assert repr(Allocation((Host("a", 3),))) == "<Allocation of 1 hosts, 3 GPUs; tiers: no tiers>"


def test_with_order_message_lists_eight_hosts_at_most() -> None:
    """Of nine hosts the message shows seven, an ellipsis and the last."""
    alloc = Allocation(tuple(Host(f"h{i}", 1) for i in range(9)))
    with exactly(
        "host order names 'z', which is not in the allocation; "
        "hosts: h0, h1, h2, h3, h4, h5, h6, ..., h8"
    ):
        alloc.with_order(["h0", "z"])


def test_rank_map_repr_and_dict_golden() -> None:
    """Three hosts of 2 GPUs and 5 ranks: ranks 0-1, 2-3, 4 (worked out by hand)."""
    rack = Tier("rack", nvlink=True, bandwidth=1.0)
    alloc = Allocation(
        (Host("a", 2, ("r1",)), Host("b", 2, (None,)), Host("c", 2, ("r1",))), (rack,)
    )
    ranks = alloc.rank_map(5)
    assert repr(ranks) == "<RankMap of 5 ranks on 3 hosts (a .. c)>"
    assert ranks.to_dict() == {
        "world_size": 5,
        "tiers": [{"name": "rack", "bandwidth": 1.0, "latency": None, "nvlink": True}],
        "hosts": [
            {"name": "a", "first_rank": 0, "ranks": 2, "domains": ["r1"]},
            {"name": "b", "first_rank": 2, "ranks": 2, "domains": [None]},
            {"name": "c", "first_rank": 4, "ranks": 1, "domains": ["r1"]},
        ],
    }
