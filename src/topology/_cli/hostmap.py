"""``show --svg`` and ``--html`` on an allocation: the real hosts, by name, inside their
domains (the NVLink domain, the rack or switch above it), each GPU a cell.

Any allocation the readers take draws: hosts of different GPU counts, ragged or interleaved
domains, hosts of unknown domain. Hosts are drawn in node order; a run of consecutive hosts in
the same domains shares one box titled with every tier's domain (a domain the order splits
shows as several boxes of one name). The drawing is bounded: at most :data:`MAX_DRAWN_HOSTS`
hosts and :data:`MAX_HOST_CELLS` cells a host; what is left out is counted in the drawing.

>>> from topology import Allocation, Host, Tier, Topology
>>> alloc = Allocation([Host("a", 2, ("r1",)), Host("b", 4, ("r2",))], [Tier("rack")])
>>> svg = allocation_svg(Topology(6, tp=2), alloc.rank_map(6))
>>> import xml.etree.ElementTree as ET
>>> ET.fromstring(svg).tag
'{http://www.w3.org/2000/svg}svg'
"""

from __future__ import annotations

import itertools
from html import escape

from .._machine.rankmap import RankMap
from .._megatron.topology import Topology
from .colours import palette, text_on
from .picture import label

__all__ = ["MAX_DRAWN_HOSTS", "MAX_HOST_CELLS", "allocation_page", "allocation_svg"]

MAX_DRAWN_HOSTS = 64
"""The drawing shows the first this many hosts in node order and counts the rest."""

MAX_HOST_CELLS = 64
"""A host with more GPUs than this draws this many cells and counts the rest."""

_PER_ROW = 8
_CELL_W, _CELL_H, _PAD, _TITLE_H = 120, 34, 8, 20


def _colour(topo: Topology, rank: int, color_by: str) -> int:
    if color_by == "ep":
        return topo.expert.coord(rank).get("ep", 0) if topo.expert is not None else 0
    return topo.dense.coord(rank)[color_by]


def _domain_title(rank_map: RankMap, domains: tuple[str | None, ...]) -> str:
    """Every tier's domain of a run of hosts: ``rack rack1 (NVLink) · leaf leaf1``."""
    parts = [
        f"{tier.name} {'(unknown)' if name is None else name}{' (NVLink)' if tier.nvlink else ''}"
        for tier, name in zip(rank_map.tiers, domains, strict=True)
    ]
    return " · ".join(parts) or "no tiers (the source says nothing of racks)"


def allocation_svg(topo: Topology, rank_map: RankMap, color_by: str = "pp") -> str:
    """The hosts of ``rank_map`` (node order) in their domains, one cell per GPU, as SVG."""
    hosts = rank_map.hosts[:MAX_DRAWN_HOSTS]
    first = 0
    starts = []
    for host in rank_map.hosts[: len(hosts)]:
        starts.append(first)
        first += host.gpus
    runs = [
        (domains, list(group))
        for domains, group in itertools.groupby(range(len(hosts)), key=lambda n: hosts[n].domains)
    ]
    colours = palette(topo.size(color_by) if color_by in topo.kinds else 1)
    box_w = _PER_ROW * (_CELL_W + _PAD) + _PAD
    width = box_w + 4 * _PAD
    out: list[str] = []
    y = _PAD
    for domains, nodes in runs:
        top = y
        y += _TITLE_H + _PAD
        inner: list[str] = []
        for node in nodes:
            host = hosts[node]
            drawn = min(host.gpus, MAX_HOST_CELLS)
            rows = -(-drawn // _PER_ROW)
            height = _TITLE_H + rows * (_CELL_H + _PAD) + _PAD
            x0 = 2 * _PAD
            inner.append(
                f'<rect x="{x0}" y="{y}" width="{box_w}" height="{height}" rx="6" '
                'fill="#f5f5f5" stroke="#333"/>'
            )
            more = f" (+ {host.gpus - drawn} GPUs not drawn)" if host.gpus > drawn else ""
            inner.append(
                f'<text x="{x0 + 8}" y="{y + 15}" font-weight="bold">{escape(host.name)} · node '
                f"rank {node} · {host.gpus} GPUs{more}</text>"
            )
            for gpu in range(drawn):
                cx = x0 + _PAD + (gpu % _PER_ROW) * (_CELL_W + _PAD)
                cy = y + _TITLE_H + (gpu // _PER_ROW) * (_CELL_H + _PAD)
                rank = starts[node] + gpu
                inner.append(_cell(topo, rank_map, rank, cx, cy, color_by, colours))
            y += height + _PAD
        out.append(
            f'<rect x="{_PAD}" y="{top}" width="{box_w + 2 * _PAD}" height="{y - top}" rx="8" '
            'fill="none" stroke="#777" stroke-dasharray="6 4"/>'
        )
        out.append(
            f'<text x="{2 * _PAD}" y="{top + 15}">{escape(_domain_title(rank_map, domains))}</text>'
        )
        out += inner
        y += _PAD
    left = len(rank_map.hosts) - len(hosts)
    if left:
        ranks = rank_map.world_size - first
        out.append(
            f'<text x="{_PAD}" y="{y + 14}">… {left} more hosts ({ranks} ranks) not drawn; '
            "the text output's tier tables and --json list them all</text>"
        )
        y += 24
    height = y + 24
    head = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="monospace" font-size="12">',
        f"<title>{escape(str(topo))} on {len(rank_map.hosts)} hosts</title>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    tail = [
        f'<text x="{_PAD}" y="{height - 8}">{escape(str(topo))}; colour: {color_by} '
        "coordinate</text>",
        "</svg>",
    ]
    return "\n".join([*head, *out, *tail]) + "\n"


def _cell(
    topo: Topology,
    rank_map: RankMap,
    rank: int,
    x: int,
    y: int,
    color_by: str,
    colours: list[str],
) -> str:
    """One GPU: its rank and coordinates, coloured by ``color_by``; idle past the job's ranks."""
    size = f'x="{x}" y="{y}" width="{_CELL_W}" height="{_CELL_H}" rx="3"'
    end = topo.rank_offset + topo.world_size
    if not topo.rank_offset <= rank < min(end, rank_map.world_size):
        return f'<rect {size} fill="none" stroke="#bbb" stroke-dasharray="4 3"/>'
    text = label(topo, rank)
    fill = colours[_colour(topo, rank, color_by) % len(colours)]
    ink = text_on(fill)
    return (
        f'<rect {size} fill="{fill}" stroke="#333"><title>rank {rank}: {escape(text)}</title>'
        f'</rect><text x="{x + 6}" y="{y + 14}" fill="{ink}">r{rank}</text>'
        f'<text x="{x + 6}" y="{y + 28}" fill="{ink}">{escape(text)}</text>'
    )


def allocation_page(topo: Topology, rank_map: RankMap, color_by: str = "pp") -> str:
    """A self-contained page (well-formed XHTML, no script) holding :func:`allocation_svg`."""
    title = escape(str(topo))
    tiers = (
        ", ".join(f"{t.name}{' (NVLink)' if t.nvlink else ''}" for t in rank_map.tiers) or "none"
    )
    svg = allocation_svg(topo, rank_map, color_by)
    return f"""<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" lang="en">
<head>
<meta charset="utf-8"/>
<title>{title}</title>
<style>body {{ font: 13px/1.4 system-ui, sans-serif; margin: 16px; }}</style>
</head>
<body>
<h1>{title}</h1>
<p>{rank_map.world_size} ranks on {len(rank_map.hosts)} hosts in node order; tiers: \
{escape(tiers)}. Each dashed box is a run of hosts in the same domains; hover a GPU for its
coordinates.</p>
{svg}</body>
</html>
"""
