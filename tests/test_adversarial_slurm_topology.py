"""Hostile ``topology.conf`` files: bounded work, no recursion, clean errors (issue 22, item 2).

A switch chain deeper than the interpreter's recursion limit must read (the reader walks
switches iteratively); host lists of all lines share one bound (patched small); numbers of
thousands of digits are TopologyErrors.
"""

from __future__ import annotations

import sys
from unittest import mock

import pytest

from topology import TopologyError
from topology._machine import hostlist
from topology._machine.readers.slurm_topology import parse_slurm_topology

HUGE = "9" * 5000


def _chain(levels: int) -> str:
    """A chain of ``levels`` switches written root first (a reader that recursed from each
    line in file order would go ``levels`` deep at once)."""
    lines = ["SwitchName=s0 Nodes=n[1-2]"]
    lines += [f"SwitchName=s{i} Switches=s{i - 1}" for i in range(1, levels)]
    return "\n".join(reversed(lines))


def test_a_switch_chain_deeper_than_the_recursion_limit_reads() -> None:
    """400 levels with the recursion limit at 200: every level a tier, each host up the chain."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        alloc = parse_slurm_topology(_chain(400), gpus_per_host=8)
    finally:
        sys.setrecursionlimit(limit)
    assert [t.name for t in alloc.tiers[:4]] == ["leaf", "spine", "core", "level3"]
    assert len(alloc.tiers) == 400
    assert alloc.hosts[0].domains == tuple(f"s{i}" for i in range(400))


def test_a_loop_without_a_root_is_found_iteratively() -> None:
    """A ring of 500 switches (no root) deeper than the recursion limit: the loop is named."""
    lines = ["SwitchName=leaf Nodes=n1", "SwitchName=r0 Switches=leaf,r499"]
    lines += [f"SwitchName=r{i} Switches=r{i - 1}" for i in range(1, 500)]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        with pytest.raises(TopologyError, match=r"switches form a loop \(r\d+ -> "):
            parse_slurm_topology("\n".join(lines), gpus_per_host=8)
    finally:
        sys.setrecursionlimit(limit)


def test_an_uneven_tree_still_uses_the_lowest_ancestor_of_each_level() -> None:
    """A leaf under a level-2 switch directly: its spine domain is that switch."""
    text = (
        "SwitchName=a Nodes=n1\nSwitchName=b Nodes=n2\nSwitchName=m Switches=a\n"
        "SwitchName=top Switches=m,b"
    )
    alloc = parse_slurm_topology(text, gpus_per_host=8)
    assert [h.domains for h in alloc.hosts] == [("a", "m", "top"), ("b", "top", "top")]


def test_the_host_lists_of_all_lines_share_one_bound() -> None:
    """Three lines of 3 nodes pass a bound of 8 for the whole file."""
    text = "SwitchName=a Nodes=a[1-3]\nSwitchName=b Nodes=b[1-3]\nSwitchName=c Nodes=c[1-3]"
    with (
        mock.patch.object(hostlist, "MAX_HOSTS", 8),
        pytest.raises(
            TopologyError, match=r"topology.conf names more than 8 hosts in all its host lists"
        ),
    ):
        parse_slurm_topology(text, gpus_per_host=8)


def test_block_lines_share_the_bound_too() -> None:
    """Block lines count against the same budget."""
    text = "BlockName=a Nodes=a[1-5]\nBlockName=b Nodes=b[1-5]"
    with (
        mock.patch.object(hostlist, "MAX_HOSTS", 8),
        pytest.raises(TopologyError, match="names more than 8 hosts"),
    ):
        parse_slurm_topology(text, gpus_per_host=8)


@pytest.mark.parametrize("sizes", [HUGE, f"18,{HUGE}"])
def test_block_sizes_of_thousands_of_digits_are_refused(sizes: str) -> None:
    """BlockSizes= entries past 18 digits: a TopologyError naming the limit."""
    text = f"BlockName=b Nodes=n1\nBlockSizes={sizes}"
    with pytest.raises(TopologyError, match=r"BlockSizes entry of 5000 characters.*at most 18"):
        parse_slurm_topology(text, gpus_per_host=8)


def test_a_node_list_number_of_thousands_of_digits_is_refused() -> None:
    """Nodes=n[99...9]: a TopologyError, not int()'s limit."""
    with pytest.raises(TopologyError, match=r"a number of 5000 digits"):
        parse_slurm_topology(f"SwitchName=s Nodes=n[{HUGE}]", gpus_per_host=8)
