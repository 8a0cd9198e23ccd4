"""Slurm's ``topology.conf`` plus a job's host list as an :class:`~.allocation.Allocation`
(private).

Source: ``topology.conf(5)`` (SchedMD/slurm ``doc/man/man5/topology.conf.5``, Slurm 26.11).
Parameter names are case-insensitive, ``#`` starts a comment, and node and switch lists use
Slurm's host-list syntax (:mod:`~.hostlist`). Two plugins are read:

``topology/tree``: each line ``SwitchName=NAME`` with ``Nodes=HOSTLIST`` (a leaf switch) or
``Switches=HOSTLIST`` (its child switches), optionally ``LinkSpeed=N`` (arbitrary units, unused
by Slurm and ignored here). A switch's level is 0 for a leaf and one more than its highest
child otherwise; tier ``L`` (``leaf``, ``spine``, ``core``, then ``level3``...) puts a host in
its lowest ancestor of level ``>= L`` (the root of its tree if none is that high)::

    SwitchName=s0 Nodes=dev[0-5]
    SwitchName=s1 Nodes=dev[6-11]
    SwitchName=s2 Switches=s[0-1]

``topology/block``: ``BlockName=NAME Nodes=HOSTLIST`` lines, and optionally one
``BlockSizes=B0,B1,...`` line: ``B0`` is the base block size and each later size (``B0`` times
a power of two) makes Slurm pair consecutive blocks into larger ones (``block_record.c``:
aggregate ``j`` holds blocks ``i`` with the same ``i // (Bj / B0)``, in file order). Tier
``block`` holds the blocks (an NVLink domain each when ``block_nvlink``, the NVL72 use of the
plugin), tier ``block<Bj>`` each aggregate, named ``first..last``::

    BlockName=b1 Nodes=node[1-18]
    BlockName=b2 Nodes=node[19-36]
    BlockSizes=18,36

``RingName`` (topology/ring) is not modelled. The job's hosts (``SLURM_JOB_NODELIST``) come in
listed order; a host the file does not name has unknown domains. Without ``hosts`` every node of
the file is used, in file order.

>>> alloc = parse_slurm_topology("SwitchName=s0 Nodes=n[1-2]\\nSwitchName=s1 Switches=s0",
...                              hosts="n[2,1]", gpus_per_host=8)
>>> [(h.name, h.domains) for h in alloc.hosts], [t.name for t in alloc.tiers]
([('n2', ('s0', 's1')), ('n1', ('s0', 's1'))], ['leaf', 'spine'])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ..._args import show
from ..._errors import TopologyError
from ..allocation import Allocation, Host, Tier
from ..hostlist import HostCount
from ..hosts import check_gpus
from ..textfile import lines, read_text, selected_hosts

__all__ = ["parse_slurm_topology", "read_slurm_topology"]

_TREE_KEYS = {"switchname", "switches", "nodes", "linkspeed"}
_BLOCK_KEYS = {"blockname", "nodes"}
_TIER_NAMES = ("leaf", "spine", "core")
_MAX_DIGITS = 18
"""The most digits of a ``BlockSizes`` entry (Slurm reads them as 32-bit integers)."""

Line = tuple[int, dict[str, str]]


def _fields(number: int, content: str, label: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for token in content.split():
        key, equals, value = token.partition("=")
        key = key.lower()
        if not equals or not value:
            raise TopologyError(
                f"{label} line {number} has {show(token)}; every field is Name=Value"
            )
        if key in fields:
            raise TopologyError(f"{label} line {number} gives {key} twice")
        fields[key] = value.strip("\"'")
    return fields


def _check_keys(number: int, fields: dict[str, str], allowed: set[str], label: str) -> None:
    extra = sorted(set(fields) - allowed)
    if extra:
        raise TopologyError(
            f"{label} line {number} has {extra[0]}, which this line cannot take; "
            f"valid: {', '.join(sorted(allowed))}"
        )


def _tree(
    entries: list[Line], label: str, count: HostCount
) -> tuple[list[str], dict[str, list[str]]]:
    """Tier names, and each node's domains (innermost first) in the order nodes appear.

    Linear in the file and the output, without recursion: switch levels come from one
    iterative depth-first walk, and each leaf's domains from one pass up its chain (levels
    grow strictly towards the root, so each tier's switch is found by moving one pointer).
    """
    children: dict[str, list[str]] = {}
    nodes: dict[str, tuple[str, ...]] = {}
    defined: dict[str, int] = {}
    for number, fields in entries:
        _check_keys(number, fields, _TREE_KEYS, label)
        name = fields["switchname"]
        if name in defined:
            raise TopologyError(
                f"{label} line {number} defines switch {show(name)} again "
                f"(first on line {defined[name]})"
            )
        defined[name] = number
        if "nodes" in fields and "switches" in fields:
            raise TopologyError(
                f"{label} line {number}: switch {show(name)} has both Nodes and Switches; "
                "a leaf switch has Nodes, a higher one Switches"
            )
        children[name] = list(count.expand(fields.get("switches", "")))
        nodes[name] = count.expand(fields.get("nodes", ""))
    parent: dict[str, str] = {}
    for name, kids in children.items():
        for kid in kids:
            if kid not in defined:
                raise TopologyError(
                    f"{label} line {defined[name]}: switch {show(name)} lists switch "
                    f"{show(kid)}, which no SwitchName line defines"
                )
            if kid in parent:
                raise TopologyError(
                    f"{label}: switch {show(kid)} is a child of both {show(parent[kid])} and "
                    f"{show(name)}; give each switch one parent"
                )
            parent[kid] = name
    level = _levels(children, parent, label)
    depth = max(level.values()) + 1
    tiers = [_TIER_NAMES[i] if i < len(_TIER_NAMES) else f"level{i}" for i in range(depth)]
    domains: dict[str, list[str]] = {}
    leaf_of: dict[str, str] = {}
    for leaf, members in nodes.items():
        if not members:
            continue
        per_tier: list[str] = []
        switch = leaf
        for tier in range(depth):
            while level[switch] < tier and switch in parent:
                switch = parent[switch]
            per_tier.append(switch)
        for node in members:
            if node in leaf_of:
                raise TopologyError(
                    f"{label} line {defined[leaf]}: node {show(node)} is under switch "
                    f"{show(leaf_of[node])} too; give each node one leaf switch"
                )
            leaf_of[node] = leaf
            domains[node] = per_tier
    return tiers, domains


def _levels(children: dict[str, list[str]], parent: dict[str, str], label: str) -> dict[str, int]:
    """Each switch's level (0 for a leaf, one more than its highest child), by an iterative
    walk from each root; a switch never reached from a root lies on a loop."""
    level: dict[str, int] = {}
    for root in children:
        if root in parent:
            continue
        stack = [(root, 0)]
        while stack:
            name, next_kid = stack.pop()
            kids = children[name]
            if next_kid < len(kids):
                stack.append((name, next_kid + 1))
                stack.append((kids[next_kid], 0))
                continue
            level[name] = 1 + max(level[k] for k in kids) if kids else 0
    if len(level) < len(children):
        start = next(name for name in children if name not in level)
        loop = [start]
        while parent[loop[-1]] not in loop:
            loop.append(parent[loop[-1]])
        loop = loop[loop.index(parent[loop[-1]]) :]
        shown = " -> ".join(reversed([*loop, loop[0]]))
        raise TopologyError(f"{label}: switches form a loop ({shown})")
    return level


def _block_sizes(number: int, value: str, label: str) -> list[int]:
    parts = value.split(",")
    longest = max(len(p) for p in parts)
    if longest > _MAX_DIGITS:
        raise TopologyError(
            f"{label} line {number} has a BlockSizes entry of {longest} characters; block "
            f"sizes have at most {_MAX_DIGITS} digits, e.g. 18,36"
        )
    if not all(p.isascii() and p.isdecimal() and int(p) > 0 for p in parts):
        raise TopologyError(
            f"{label} line {number} has BlockSizes={value}; give positive ints, e.g. 18,36"
        )
    sizes = [int(p) for p in parts]
    base = sizes[0]
    for size, before in zip(sizes[1:], sizes, strict=False):
        ratio = size // base
        if size <= before or size % base or ratio & (ratio - 1):
            raise TopologyError(
                f"{label} line {number} has BlockSizes={value}; each size after the base "
                f"{base} must be {base} times a power of two and larger than the one before "
                f"({size} is not)"
            )
    return sizes


def _block(
    entries: list[Line], sizes: list[int], label: str, count: HostCount
) -> tuple[list[str], dict[str, list[str]]]:
    blocks: list[tuple[str, list[str]]] = []
    defined: dict[str, int] = {}
    for number, fields in entries:
        _check_keys(number, fields, _BLOCK_KEYS, label)
        name = fields["blockname"]
        if name in defined:
            raise TopologyError(
                f"{label} line {number} defines block {show(name)} again "
                f"(first on line {defined[name]})"
            )
        defined[name] = number
        blocks.append((name, list(count.expand(fields.get("nodes", "")))))
    factors = [size // sizes[0] for size in sizes[1:]]
    tiers = ["block", *(f"block{size}" for size in sizes[1:])]
    domains: dict[str, list[str]] = {}
    block_of: dict[str, str] = {}
    for index, (name, members) in enumerate(blocks):
        per_tier = [name]
        for factor in factors:
            group = blocks[index - index % factor : index - index % factor + factor]
            per_tier.append(f"{group[0][0]}..{group[-1][0]}")
        for node in members:
            if node in block_of:
                raise TopologyError(
                    f"{label} line {defined[name]}: node {show(node)} is in block "
                    f"{show(block_of[node])} too; give each node one block"
                )
            block_of[node] = name
            domains[node] = per_tier
    return tiers, domains


def parse_slurm_topology(
    text: str,
    *,
    gpus_per_host: int,
    hosts: str | Sequence[str] | None = None,
    plugin: Literal["tree", "block"] | None = None,
    block_nvlink: bool = True,
    label: str = "topology.conf",
) -> Allocation:
    """The allocation of ``hosts`` (a Slurm host list or names, launcher's listed order) on the
    network a ``topology.conf`` text describes (see the module docstring).

    ``plugin`` picks tree or block lines when the file holds both.

    Raises:
        TopologyError: a malformed line, a switch or block defined twice, a child switch never
            defined, a loop, a node under two leaves or blocks, bad ``BlockSizes``.
    """
    check_gpus("gpus_per_host", gpus_per_host)
    if plugin not in (None, "tree", "block"):
        raise TopologyError(f"plugin must be 'tree', 'block' or None, got {show(plugin)}")
    tree: list[Line] = []
    block: list[Line] = []
    sizes: list[int] | None = None
    for number, content in lines(text):
        fields = _fields(number, content, label)
        head = content.partition("=")[0]
        first = head.lower()
        if first == "switchname":
            tree.append((number, fields))
        elif first == "blockname":
            block.append((number, fields))
        elif first == "blocksizes":
            _check_keys(number, fields, {"blocksizes"}, label)
            if sizes is not None:
                raise TopologyError(f"{label} line {number} gives BlockSizes a second time")
            sizes = _block_sizes(number, fields["blocksizes"], label)
        else:
            raise TopologyError(
                f"{label} line {number} starts with {show(head)}; "
                "lines start with SwitchName= (tree), BlockName= or BlockSizes= (block)"
            )
    if plugin is None:
        if tree and block:
            raise TopologyError(
                f"{label} has both SwitchName and BlockName lines; pass plugin='tree' or 'block'"
            )
        plugin = "block" if block else "tree"
    chosen = tree if plugin == "tree" else block
    if not chosen:
        kind = "SwitchName" if plugin == "tree" else "BlockName"
        raise TopologyError(f"{label} has no {kind} lines for the {plugin} plugin")
    if plugin == "tree":
        names, domains = _tree(tree, label, HostCount(label))
        tiers = [Tier(name) for name in names]
    else:
        names, domains = _block(block, sizes or [1], label, HostCount(label))
        tiers = [Tier(name, nvlink=block_nvlink and i == 0) for i, name in enumerate(names)]
    chosen_hosts = selected_hosts(hosts, label)
    if chosen_hosts is None:
        chosen_hosts = tuple(domains)
        if not chosen_hosts:
            raise TopologyError(f"{label} names no nodes; add Nodes= to its lines")
    unknown: list[str | None] = [None] * len(tiers)
    return Allocation(
        tuple(Host(name, gpus_per_host, domains.get(name, unknown)) for name in chosen_hosts),
        tuple(tiers),
    )


def read_slurm_topology(
    path: str,
    *,
    gpus_per_host: int,
    hosts: str | Sequence[str] | None = None,
    plugin: Literal["tree", "block"] | None = None,
    block_nvlink: bool = True,
) -> Allocation:
    """:func:`parse_slurm_topology` on the file at ``path``."""
    label = f"topology.conf {show(path)}"
    return parse_slurm_topology(
        read_text(path, label),
        gpus_per_host=gpus_per_host,
        hosts=hosts,
        plugin=plugin,
        block_nvlink=block_nvlink,
        label=label,
    )
