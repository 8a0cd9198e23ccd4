"""Allocation readers: our TOML/JSON file, Slurm topology.conf, Topograph JSON, hostfiles.

Golden files under tests/data/allocation/ are written from each format's documented syntax.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from topology import Allocation, TopologyError
from topology._machine.readers.hostfile import parse_hostfile, read_hostfile
from topology._machine.readers.native_format import allocation_from_dict, read_allocation
from topology._machine.readers.slurm_topology import parse_slurm_topology, read_slurm_topology
from topology._machine.readers.topograph import parse_topograph, read_topograph

DATA = Path(__file__).parent / "data" / "allocation"


def table(alloc: Allocation) -> list[tuple[str, int, tuple[str | None, ...]]]:
    return [(h.name, h.gpus, h.domains) for h in alloc.hosts]


# ---- our format ----


@pytest.mark.parametrize("name", ["nvl72.toml", "nvl72.json"])
def test_our_file_golden(name: str) -> None:
    """The documented example: two racks (one ragged), a spare of unknown domains."""
    alloc = read_allocation(str(DATA / name))
    assert [t.name for t in alloc.tiers] == ["rack", "leaf"]
    assert alloc.tiers[0].nvlink and alloc.tiers[0].bandwidth == 900e9
    assert alloc.tiers[1].latency == 10e-6
    assert len(alloc.hosts) == 35
    assert table(alloc)[17] == ("node18", 4, ("rack1", "leaf1"))
    assert table(alloc)[33] == ("node34", 4, ("rack2", "leaf2"))
    assert table(alloc)[34] == ("spare1", 2, (None, None))
    assert alloc.gpus == 34 * 4 + 2


def test_toml_and_json_agree() -> None:
    """Both spellings of the example give the same allocation."""
    assert read_allocation(str(DATA / "nvl72.toml")) == read_allocation(str(DATA / "nvl72.json"))


BASE: dict[str, Any] = {"tiers": [{"name": "rack"}], "hosts": [{"name": "a", "gpus": 4}]}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hostz": []}, "unknown key 'hostz'; valid: gpus_per_host, hosts, tiers, version"),
        ({"version": 2}, "version 2; this reader knows 1"),
        ({"hosts": []}, "has no hosts"),
        ({"hosts": {}}, "hosts must be a list"),
        ({"tiers": [{"bandwidth": 1}]}, r"tiers\[0\] needs a name"),
        ({"tiers": [{"name": "r", "nvlink": 1}]}, r"tiers\[0\].nvlink must be true or false"),
        ({"tiers": [{"name": "r", "latency": "1us"}]}, r"tiers\[0\].latency must be a number"),
        ({"tiers": [{"name": "r", "bandwidth": -1}]}, r"tiers\[0\]: Tier.bandwidth must be"),
        ({"hosts": [{"gpus": 4}]}, r"hosts\[0\] needs exactly one of name"),
        ({"hosts": [{"name": "a", "names": "b", "gpus": 1}]}, "exactly one of name"),
        ({"hosts": [{"name": "a"}]}, r"hosts\[0\] has no gpus and the file no gpus_per_host"),
        ({"hosts": [{"name": "a", "gpus": 0}]}, r"hosts\[0\].gpus must be a positive int"),
        ({"gpus_per_host": 2.5}, "gpus_per_host must be a positive int"),
        ({"hosts": [{"names": "n[1-", "gpus": 1}]}, "'\\[' without '\\]'"),
        (
            {"hosts": [{"name": "a", "gpus": 1, "domains": {"leaf": "l1"}}]},
            r"hosts\[0\].domains has unknown key 'leaf'; valid: rack",
        ),
        (
            {"hosts": [{"name": "a", "gpus": 1, "domains": {"rack": 3}}]},
            r"hosts\[0\].domains.rack must be a non-empty string",
        ),
        (
            {"hosts": [{"names": "a,b,a", "gpus": 1}]},
            "host 'a' is listed twice",
        ),
    ],
)
def test_our_file_errors(change: dict[str, Any], message: str) -> None:
    """Each malformed allocation file names the key, the value and what is valid."""
    with pytest.raises(TopologyError, match=message):
        allocation_from_dict({**BASE, **change})


def test_our_file_must_be_a_table() -> None:
    """A JSON list at the top is not an allocation."""
    with pytest.raises(TopologyError, match="allocation must be a table"):
        allocation_from_dict([1, 2])


def test_our_file_reader_errors(tmp_path: Path) -> None:
    """Unreadable or invalid files raise TopologyError naming the file."""
    with pytest.raises(TopologyError, match="cannot read allocation file"):
        read_allocation(str(tmp_path / "missing.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("hosts = [")
    with pytest.raises(TopologyError, match="is not valid TOML"):
        read_allocation(str(bad))


# ---- Slurm topology.conf ----


def test_tree_golden() -> None:
    """topology.conf(5)'s tree example: leaves s0..s2 under spine s3."""
    alloc = read_slurm_topology(
        str(DATA / "tree.conf"), gpus_per_host=8, hosts="dev[4-7],dev12,gpu1"
    )
    assert [t.name for t in alloc.tiers] == ["leaf", "spine"]
    assert table(alloc) == [
        ("dev4", 8, ("s0", "s3")),
        ("dev5", 8, ("s0", "s3")),
        ("dev6", 8, ("s1", "s3")),
        ("dev7", 8, ("s1", "s3")),
        ("dev12", 8, ("s2", "s3")),
        ("gpu1", 8, (None, None)),
    ]


def test_tree_without_hosts_uses_every_node_in_file_order() -> None:
    """No host list: all 18 nodes, leaf by leaf."""
    alloc = read_slurm_topology(str(DATA / "tree.conf"), gpus_per_host=4)
    assert [h.name for h in alloc.hosts] == [f"dev{i}" for i in range(18)]


def test_uneven_tree_uses_the_lowest_ancestor_of_each_level() -> None:
    """A leaf hanging directly off a level-2 switch is in that switch at levels 1 and 2."""
    text = """
    SwitchName=l0 Nodes=a[1-2]
    SwitchName=l1 Nodes=b1
    SwitchName=m0 Switches=l0
    SwitchName=top Switches=m0,l1
    """
    alloc = parse_slurm_topology(text, gpus_per_host=1)
    assert [t.name for t in alloc.tiers] == ["leaf", "spine", "core"]
    assert table(alloc) == [
        ("a1", 1, ("l0", "m0", "top")),
        ("a2", 1, ("l0", "m0", "top")),
        ("b1", 1, ("l1", "top", "top")),
    ]


def test_block_golden() -> None:
    """Four 18-node blocks paired into 36-node aggregates; the job misses some nodes."""
    alloc = read_slurm_topology(
        str(DATA / "block.conf"), gpus_per_host=4, hosts="node[1-2,19,37,55-56]"
    )
    assert [(t.name, t.nvlink) for t in alloc.tiers] == [("block", True), ("block36", False)]
    assert table(alloc) == [
        ("node1", 4, ("b1", "b1..b2")),
        ("node2", 4, ("b1", "b1..b2")),
        ("node19", 4, ("b2", "b1..b2")),
        ("node37", 4, ("b3", "b3..b4")),
        ("node55", 4, ("b4", "b3..b4")),
        ("node56", 4, ("b4", "b3..b4")),
    ]


def test_block_sizes_of_the_manual() -> None:
    """topology.conf(5)'s block example: BlockSizes=30,120 groups four blocks."""
    lines = [f"BlockName=block{i} Nodes=node[{32 * i - 31}-{32 * i}]" for i in range(1, 5)]
    text = "\n".join([*lines, "BlockSizes=30,120"])
    alloc = parse_slurm_topology(text, gpus_per_host=4, hosts="node[1,128]", block_nvlink=False)
    assert table(alloc) == [
        ("node1", 4, ("block1", "block1..block4")),
        ("node128", 4, ("block4", "block1..block4")),
    ]
    assert not alloc.tiers[0].nvlink


def test_ragged_last_aggregate_is_kept() -> None:
    """Three blocks in pairs: the third forms an aggregate of its own."""
    text = "BlockName=x Nodes=a1\nBlockName=y Nodes=a2\nBlockName=z Nodes=a3\nblocksizes=1,2"
    alloc = parse_slurm_topology(text, gpus_per_host=1)
    assert [h.domains[1] for h in alloc.hosts] == ["x..y", "x..y", "z..z"]


def test_plugin_picks_one_kind_of_line() -> None:
    """A file with both tree and block lines needs plugin=."""
    text = "SwitchName=s Nodes=a1\nBlockName=b Nodes=a1"
    with pytest.raises(TopologyError, match="both SwitchName and BlockName lines; pass plugin="):
        parse_slurm_topology(text, gpus_per_host=1)
    assert parse_slurm_topology(text, gpus_per_host=1, plugin="block").hosts[0].domains == ("b",)
    assert parse_slurm_topology(text, gpus_per_host=1, plugin="tree").hosts[0].domains == ("s",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no SwitchName lines for the tree plugin"),
        ("RingName=r Nodes=a[1-4]", "line 1 starts with 'RingName'; lines start with"),
        ("SwitchName=s Nodes", "line 1 has 'Nodes'; every field is Name=Value"),
        ("SwitchName=s Nodes=a Nodes=b", "line 1 gives nodes twice"),
        ("SwitchName=s Blocks=a", "line 1 has blocks, which this line cannot take"),
        ("SwitchName=s Nodes=a\nSwitchName=s Nodes=b", "line 2 defines switch 's' again"),
        ("SwitchName=s Nodes=a Switches=t", "has both Nodes and Switches"),
        ("SwitchName=s Switches=t", "lists switch 't', which no SwitchName line defines"),
        (
            "SwitchName=a Nodes=x\nSwitchName=p Switches=a\nSwitchName=q Switches=a",
            "switch 'a' is a child of both 'p' and 'q'",
        ),
        (
            "SwitchName=a Switches=b\nSwitchName=b Switches=a",
            r"switches form a loop \(a -> b -> a\)",
        ),
        ("SwitchName=a Nodes=x\nSwitchName=b Nodes=x", "node 'x' is under switch 'a' too"),
        ("SwitchName=a", "names no nodes"),
        ("BlockName=b Nodes=x\nBlockName=b Nodes=y", "defines block 'b' again"),
        ("BlockName=b Nodes=x\nBlockName=c Nodes=x", "node 'x' is in block 'b' too"),
        ("BlockName=b Nodes=x\nBlockSizes=4,a", "BlockSizes=4,a; give positive ints"),
        ("BlockName=b Nodes=x\nBlockSizes=4,12", r"4 times a power of two .*\(12 is not\)"),
        ("BlockName=b Nodes=x\nBlockSizes=4,8,8", r"\(8 is not\)"),
        ("BlockName=b Nodes=x\nBlockSizes=4\nBlockSizes=4", "line 3 gives BlockSizes a second"),
        ("BlockName=b Nodes=x\nBlockSizes=4 Nodes=x", "line 2 has nodes, which this line cannot"),
        ("SwitchName=s Nodes=a[1-", r"'\[' without '\]'"),
    ],
)
def test_slurm_topology_errors(text: str, message: str) -> None:
    """Each malformed topology.conf names the line, the value and the rule."""
    with pytest.raises(TopologyError, match=message):
        parse_slurm_topology(text, gpus_per_host=4)


def test_slurm_topology_argument_errors() -> None:
    """Bad gpus_per_host, plugin or host lists are named."""
    text = "SwitchName=s Nodes=a[1-2]"
    with pytest.raises(TopologyError, match="gpus_per_host must be a positive int"):
        parse_slurm_topology(text, gpus_per_host=0)
    with pytest.raises(TopologyError, match="plugin must be 'tree', 'block' or None"):
        parse_slurm_topology(text, gpus_per_host=1, plugin="ring")  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="host 'a1' is listed twice"):
        parse_slurm_topology(text, gpus_per_host=1, hosts="a[1-2],a1")
    with pytest.raises(TopologyError, match="the host list is empty"):
        parse_slurm_topology(text, gpus_per_host=1, hosts="")


# ---- Topograph ----


def test_topograph_golden() -> None:
    """Layers closest first, the NVLink domain label, and a shallower instance."""
    alloc = read_topograph(str(DATA / "topograph.json"), gpus_per_host=4)
    assert [(t.name, t.nvlink) for t in alloc.tiers] == [
        ("nvlink", True),
        ("leaf", False),
        ("spine", False),
    ]
    assert table(alloc) == [
        ("node1", 4, ("nvl-1", "leaf-a", "spine-a")),
        ("node2", 4, ("nvl-1", "leaf-a", "spine-a")),
        ("node3", 4, ("nvl-2", "leaf-b", "spine-a")),
        ("node4", 4, (None, "leaf-b", None)),
    ]


def test_topograph_hosts_choose_and_order_instances() -> None:
    """hosts picks instances in the order given; an unknown id has unknown domains."""
    alloc = read_topograph(str(DATA / "topograph.json"), gpus_per_host=8, hosts="node3,node1,x9")
    assert table(alloc) == [
        ("node3", 8, ("nvl-2", "leaf-b", "spine-a")),
        ("node1", 8, ("nvl-1", "leaf-a", "spine-a")),
        ("x9", 8, (None, None, None)),
    ]


def test_topograph_without_nvlink_labels_has_network_tiers_only() -> None:
    """No instance carries the domain label: no nvlink tier."""
    data = {"instances": [{"id": "a", "network_layers": ["l"]}, {"id": "b"}]}
    alloc = parse_topograph(data, gpus_per_host=2)
    assert [t.name for t in alloc.tiers] == ["leaf"]
    assert table(alloc) == [("a", 2, ("l",)), ("b", 2, (None,))]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "must be an object with a non-empty list 'instances'"),
        ({"instances": []}, "non-empty list 'instances'"),
        ({"instances": [3]}, r"instances\[0\] must be an object"),
        ({"instances": [{"id": ""}]}, r"instances\[0\] has id ''"),
        ({"instances": [{"id": "a", "network_layers": "l"}]}, "network_layers 'l'; give a list"),
        ({"instances": [{"id": "a", "labels": [1]}]}, r"labels \[1\]; give an object"),
        (
            {"instances": [{"id": "a", "labels": {"accelerator.topograph.run/domain": 1}}]},
            "accelerator.topograph.run/domain 1; give a string",
        ),
        ({"instances": [{"id": "a"}, {"id": "a"}]}, "lists instance 'a' twice"),
    ],
)
def test_topograph_errors(data: object, message: str) -> None:
    """Each malformed Topograph document names the instance and the field."""
    with pytest.raises(TopologyError, match=message):
        parse_topograph(data, gpus_per_host=4)


# ---- hostfile ----


def test_hostfile_golden() -> None:
    """Hosts in file order; slots where given, gpus_per_host elsewhere; host lists expand."""
    alloc = read_hostfile(str(DATA / "hostfile.txt"), gpus_per_host=8)
    assert table(alloc) == [
        ("node66", 4, ()),
        ("node7", 4, ()),
        ("node70", 8, ()),
        ("node71", 8, ()),
    ]
    assert alloc.rank_map(8, order="natural").host_order == ("node7", "node66")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("# nothing\n\n", "names no hosts"),
        ("a slots=4\nb", "line 2: host 'b' has no slots=N and no gpus_per_host"),
        ("a max_slots=4", "line 1 has 'max_slots=4'; after the host only slots=N may follow"),
        ("a slots=x", "line 1 has slots=x; slots must be a positive int in plain digits"),
        ("a slots=0", "slots must be a positive int, got 0"),
        ("slots=4 a", "line 1 starts with 'slots=4'; give the host name first"),
        ("a slots=1\n\nb slots=1\na slots=1", "line 4 lists host 'a' again \\(first on line 1\\)"),
    ],
)
def test_hostfile_errors(text: str, message: str) -> None:
    """Each malformed hostfile names the line and the fix."""
    with pytest.raises(TopologyError, match=message):
        parse_hostfile(text)


def test_hostfile_reader_errors(tmp_path: Path) -> None:
    """A directory or non-UTF-8 file is refused with the path named."""
    with pytest.raises(TopologyError, match="is a directory, not a regular file"):
        read_hostfile(str(tmp_path))
    binary = tmp_path / "hosts"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(TopologyError, match="is not UTF-8 text"):
        read_hostfile(str(binary), gpus_per_host=1)
    with pytest.raises(TopologyError, match="gpus_per_host must be a positive int"):
        parse_hostfile("a", gpus_per_host=-1)
