"""The picture of a small layout: nodes as boxes, one labelled cell per GPU (text, colour, SVG).

A cell reads ``r5 t1 p0 d3``: rank 5 is tp rank 1, pipeline stage 0, data-parallel replica 3
(``c``/``e`` are added when cp / ep > 1). Cells are coloured by one axis's coordinate (the
pipeline stage unless ``color_by`` says otherwise), so the GPUs of one stage, or of one dp
replica, stand out together.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from .._machine.cluster import Cluster
from .._megatron.topology import Topology
from .colours import palette, text_on
from .text import wrap

__all__ = ["MAX_PICTURE_RANKS", "Cell", "cells", "render_rich", "render_svg", "render_text"]

MAX_PICTURE_RANKS = 256
"""Worlds up to this size get a picture; larger ones a summary table."""

MAX_NODE_SLOTS = 64
"""A node with more GPUs than this is drawn with the layout's GPUs only, idle ones counted."""

_AXES = (("tp", "t"), ("pp", "p"), ("dp", "d"), ("cp", "c"), ("ep", "e"))
_PER_ROW = 8


def _per_row(gpus: int, width: int, columns: int) -> int:
    """Cells per text row: the largest divisor of ``gpus`` whose box fits ``columns`` (max 8)."""
    fit = max(1, min(_PER_ROW, (columns - 2) // (width + 2)))
    return max(d for d in range(1, fit + 1) if gpus % d == 0)


Cell = tuple[int, str, int]
"""``(rank, label, colour index)``."""


def label(topo: Topology, rank: int) -> str:
    """``t1 p0 d3`` (with ``c``/``e``/``g``/``eg`` when cp / ep / gtp / egtp > 1) for ``rank``.

    >>> label(Topology(16, tp=2, pp=4), 5)
    't1 p1 d0'
    """
    dense = topo.dense.coord(rank)
    expert = topo.expert.coord(rank) if topo.expert is not None else {}
    parts = []
    for axis, letter in _AXES:
        if axis == "ep":
            if topo.ep > 1:
                parts.append(f"e{expert.get('ep', 0)}")
        elif axis != "cp" or topo.cp > 1:
            parts.append(f"{letter}{dense[axis]}")
    if topo.gtp > 1:
        parts.insert(1, f"g{dense['gtp']}")
    if topo.egtp > 1:
        parts.append(f"eg{expert['egtp']}")
    return " ".join(parts)


def cells(topo: Topology, color_by: str = "pp") -> list[Cell]:
    """One cell per rank of ``topo``, in rank order."""
    result = []
    for rank in range(topo.rank_offset, topo.rank_offset + topo.world_size):
        if color_by == "ep":
            expert = topo.expert.coord(rank) if topo.expert is not None else {}
            colour = expert.get("ep", 0)
        else:
            colour = topo.dense.coord(rank)[color_by]
        result.append((rank, label(topo, rank), colour))
    return result


Node = tuple[int, list[Cell | None], int]
"""``(node, slots, idle GPUs left undrawn)``; a slot is None for an idle GPU that is drawn."""


def _nodes(topo: Topology, cluster: Cluster, color_by: str) -> list[Node]:
    """The nodes the layout touches; at most ``MAX_NODE_SLOTS`` idle slots are drawn per node.

    The layout has at most ``MAX_PICTURE_RANKS`` ranks, so this is bounded however many GPUs a
    node has.
    """
    gpus = cluster.gpus_per_node
    start, stop = topo.rank_offset, topo.rank_offset + topo.world_size
    by_rank = {c[0]: c for c in cells(topo, color_by)}
    nodes: list[Node] = []
    for node in range(start // gpus, (stop - 1) // gpus + 1):
        low, high = node * gpus, (node + 1) * gpus
        if gpus <= MAX_NODE_SLOTS:
            nodes.append((node, [by_rank.get(r) for r in range(low, high)], 0))
            continue
        used = range(max(low, start), min(high, stop))
        nodes.append((node, [by_rank[r] for r in used], gpus - len(used)))
    return nodes


def _node_lines(
    node: int, slots: Sequence[Cell | None], width: int, columns: int, idle: int = 0
) -> list[list[tuple[str, int | None]]]:
    """Lines of one node box; each line is segments ``(text, colour index or None)``."""
    per_row = _per_row(len(slots), width, columns)
    inner = per_row * (width + 2)
    title = f" node {node} "
    lines: list[list[tuple[str, int | None]]] = [
        [("┌─" + title + "─" * max(0, inner - len(title) - 1) + "┐", None)]
    ]
    for start in range(0, len(slots), per_row):
        row: list[tuple[str, int | None]] = [("│", None)]
        for slot in slots[start : start + per_row]:
            if slot is None:
                row.append((" " + "·".center(width) + " ", None))
            else:
                rank, text, colour = slot
                row.append((" ", None))
                row.append((f"r{rank} {text}".ljust(width), colour))
                row.append((" ", None))
        row.append(("│", None))
        lines.append(row)
        if start + per_row < len(slots):
            lines.append([("│" + " " * inner + "│", None)])
    if idle:
        note = f"+ {idle} more GPUs outside this layout (not drawn)"
        for part in wrap(note, inner - 2):
            lines.append([("│ " + part.ljust(inner - 1) + "│", None)])
    lines.append([("└" + "─" * inner + "┘", None)])
    return lines


def picture(
    topo: Topology, cluster: Cluster, color_by: str = "pp", columns: int = 80
) -> list[list[tuple[str, int | None]]]:
    """All lines of the picture, as coloured segments, each at most ``columns`` wide.

    A node box holds as many cells per row as fit (a divisor of the node's GPUs, at most 8;
    one when even one does not fit), and the legend wraps between words.
    """
    nodes = _nodes(topo, cluster, color_by)
    width = max(len(f"r{c[0]} {c[1]}") for _, slots, _ in nodes for c in slots if c)
    lines: list[list[tuple[str, int | None]]] = []
    for node, slots, idle in nodes:
        lines.extend(_node_lines(node, slots, width, columns, idle))
    axis = dict(_AXES)[color_by]
    legend = f"colour: {color_by} coordinate ({axis}N); r = global rank"
    lines.extend([(part, None)] for part in wrap(legend, columns))
    return lines


def render_text(lines: list[list[tuple[str, int | None]]]) -> str:
    """The picture as plain text."""
    return "\n".join("".join(text for text, _ in line) for line in lines) + "\n"


def render_rich(lines: list[list[tuple[str, int | None]]]) -> None:
    """Print the picture in colour with rich (imported only here)."""
    from rich.console import Console
    from rich.text import Text

    console = Console(highlight=False)
    used = [colour for line in lines for _, colour in line if colour is not None]
    colours = palette(max(used, default=0) + 1)
    for line in lines:
        text = Text()
        for segment, colour in line:
            style = None if colour is None else f"bold {colours[colour]}"
            text.append(segment, style=style)
        console.print(text, soft_wrap=True)


def render_svg(topo: Topology, cluster: Cluster, color_by: str = "pp") -> str:
    """The same picture as a standalone SVG document."""
    nodes = _nodes(topo, cluster, color_by)
    used = [slot[2] for _, slots, _ in nodes for slot in slots if slot is not None]
    colours = palette(max(used, default=0) + 1)
    cell_w, cell_h, pad, title_h = 120, 34, 8, 22
    drawn = max(len(slots) for _, slots, _ in nodes)
    per_row = min(_PER_ROW, drawn)
    rows = -(-drawn // per_row)
    node_w = per_row * (cell_w + pad) + pad
    node_h = title_h + rows * (cell_h + pad) + pad
    width = node_w + 2 * pad
    height = len(nodes) * (node_h + pad) + pad + 24
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="monospace" font-size="12">',
        f"<title>{escape(str(topo))}</title>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for index, (node, slots, idle) in enumerate(nodes):
        y0 = pad + index * (node_h + pad)
        out.append(
            f'<rect x="{pad}" y="{y0}" width="{node_w}" height="{node_h}" rx="6" '
            f'fill="#f5f5f5" stroke="#333"/>'
        )
        more = f" (+ {idle} GPUs outside this layout)" if idle else ""
        out.append(f'<text x="{pad + 8}" y="{y0 + 16}" font-weight="bold">node {node}{more}</text>')
        for slot_index, slot in enumerate(slots):
            x = 2 * pad + (slot_index % per_row) * (cell_w + pad)
            y = y0 + title_h + (slot_index // per_row) * (cell_h + pad)
            if slot is None:
                out.append(
                    f'<rect x="{x}" y="{y}" width="{cell_w}" height="{cell_h}" rx="3" '
                    f'fill="none" stroke="#bbb" stroke-dasharray="4 3"/>'
                )
                continue
            rank, text, colour = slot
            fill, ink = colours[colour], text_on(colours[colour])
            out.append(
                f'<rect x="{x}" y="{y}" width="{cell_w}" height="{cell_h}" rx="3" '
                f'fill="{fill}" stroke="#333"><title>rank {rank}: {escape(text)}</title></rect>'
            )
            out.append(f'<text x="{x + 6}" y="{y + 14}" fill="{ink}">r{rank}</text>')
            out.append(f'<text x="{x + 6}" y="{y + 28}" fill="{ink}">{escape(text)}</text>')
    out.append(
        f'<text x="{pad}" y="{height - 8}">{escape(str(topo))}; colour: {color_by} '
        "coordinate</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"
