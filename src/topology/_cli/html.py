"""``topology show --html FILE``: one self-contained page that draws a layout and its groups.

The page needs no network: its style, script and data are inline. Up to
:data:`MAX_DETAILED_RANKS` ranks it draws every GPU as a cell (``r5 t1 p0 d3``), inside its
node, inside its NVLink domain when a domain holds several nodes. Above that it aggregates: one
cell per node, so 16,384 ranks are 2,048 cells on 8-GPU nodes. Hovering a cell, clicking it (which
pins the choice) or typing a rank highlights the group of the chosen kind that holds the rank:
its GPUs in the detailed view, the nodes it spans in the aggregated one. Group membership is the
core's (``Topology.groups``), written into the page as one group index per rank and kind.

>>> from topology import Topology
>>> page = html_page(Topology(8, tp=2, pp=2), Cluster(4))
>>> page.startswith("<!DOCTYPE html>") and "http" not in page.replace("http-equiv", "")
True
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

from .._machine.cluster import Cluster
from .._megatron.topology import Topology
from .colours import palette, text_on
from .picture import label

__all__ = ["MAX_DETAILED_RANKS", "html_page", "page_data"]

MAX_DETAILED_RANKS = 512
"""Worlds up to this size draw one cell per GPU; larger ones one cell per node."""

_COLOUR_AXES = ("pp", "tp", "dp", "cp", "ep")


def _group_index(topo: Topology, kind: str) -> list[int]:
    """For each rank of ``topo`` (in order), the index of its group of ``kind``; -1 if none."""
    index = [-1] * topo.world_size
    for number, group in enumerate(topo.groups(kind)):
        for rank in group:
            index[rank - topo.rank_offset] = number
    return index


def _coordinates(topo: Topology, axis: str) -> list[int]:
    """Each rank's coordinate on ``axis`` (ep from the expert grid, the rest from the dense)."""
    ranks = range(topo.rank_offset, topo.rank_offset + topo.world_size)
    if axis == "ep":
        if topo.expert is None:
            return [0] * topo.world_size
        return [topo.expert.coord(rank).get("ep", 0) for rank in ranks]
    return [topo.dense.coord(rank)[axis] for rank in ranks]


def page_data(topo: Topology, cluster: Cluster) -> dict[str, Any]:
    """Everything the page's script reads: sizes, kinds, group indices, and (detailed) cells."""
    detailed = topo.world_size <= MAX_DETAILED_RANKS
    data: dict[str, Any] = {
        "layout": str(topo),
        "offset": topo.rank_offset,
        "world": topo.world_size,
        "gpus": cluster.gpus_per_node,
        "domain": cluster.nvlink_domain or cluster.gpus_per_node,
        "detailed": detailed,
        "kinds": list(topo.kinds),
        "groups": {kind: _group_index(topo, kind) for kind in topo.kinds},
    }
    if detailed:
        ranks = range(topo.rank_offset, topo.rank_offset + topo.world_size)
        sizes = {"pp": topo.pp, "tp": topo.tp, "dp": topo.dense.size("dp"), "cp": topo.cp}
        sizes["ep"] = topo.ep
        axes = [axis for axis in _COLOUR_AXES if axis == "pp" or sizes[axis] > 1]
        data["labels"] = [label(topo, rank) for rank in ranks]
        data["axes"] = {axis: _coordinates(topo, axis) for axis in axes}
        data["colours"] = {
            axis: [[bg, text_on(bg)] for bg in palette(sizes[axis])] for axis in axes
        }
    return data


_STYLE = """
body { font: 13px/1.4 system-ui, sans-serif; margin: 16px; color: #111; background: #fff; }
h1 { font-size: 16px; margin: 0 0 8px; }
#controls { display: flex; gap: 16px; flex-wrap: wrap; align-items: center; margin-bottom: 8px; }
#info { min-height: 2.8em; margin: 6px 0 10px; padding: 6px 8px; background: #f3f3f3; }
#legend { display: flex; flex-wrap: wrap; gap: 6px; margin-bottom: 10px; }
.swatch { padding: 1px 6px; border-radius: 3px; font-family: monospace; }
#map { display: flex; flex-wrap: wrap; gap: 8px; align-items: flex-start; }
.domain { border: 2px dashed #777; padding: 6px; display: flex; flex-wrap: wrap; gap: 8px; }
.node { border: 1px solid #333; border-radius: 6px; padding: 4px; background: #f7f7f7; }
.node > .title { font-weight: bold; font-size: 12px; margin-bottom: 3px; }
.node > .cells { display: grid; grid-template-columns: repeat(var(--per-row), auto); gap: 4px; }
.cell { font-family: monospace; font-size: 12px; padding: 3px 5px; border-radius: 3px;
        border: 2px solid transparent; cursor: pointer; white-space: pre; }
.cell.idle { border: 1px dashed #aaa; color: #999; cursor: default; }
#map.aggregated { gap: 3px; }
#map.aggregated .cell { width: 14px; height: 14px; padding: 0; background: #c8c8c8; }
#map.selecting .cell:not(.hl) { opacity: 0.28; }
.cell.hl { border-color: #111; }
.cell.sel { outline: 3px solid #d00; outline-offset: 1px; }
"""

_SCRIPT = """
const D = JSON.parse(document.getElementById('data').textContent);
const map = document.getElementById('map');
const kindSelect = document.getElementById('kind');
const colourSelect = document.getElementById('colour');
const info = document.getElementById('info');
let pinned = null;

function nodeOf(rank) { return Math.floor(rank / D.gpus); }
function list(values) {
  return values.length <= 64 ? values.join(', ') : values.length + ' (first ' +
    values.slice(0, 16).join(', ') + ', ...)';
}

function build() {
  map.className = D.detailed ? 'detailed' : 'aggregated';
  const first = D.offset, last = D.offset + D.world - 1;
  const perDomain = Math.max(1, Math.floor(D.domain / D.gpus));
  let domainBox = null;
  for (let node = nodeOf(first); node <= nodeOf(last); node++) {
    let parent = map;
    if (perDomain > 1) {
      const domain = Math.floor(node / perDomain);
      if (!domainBox || domainBox.dataset.domain != domain) {
        domainBox = document.createElement('div');
        domainBox.className = 'domain';
        domainBox.dataset.domain = domain;
        domainBox.title = 'NVLink domain ' + domain;
        map.appendChild(domainBox);
      }
      parent = domainBox;
    }
    if (!D.detailed) {
      const cell = document.createElement('div');
      cell.className = 'cell';
      cell.dataset.node = node;
      cell.title = 'node ' + node;
      parent.appendChild(cell);
      continue;
    }
    const box = document.createElement('div');
    box.className = 'node';
    box.innerHTML = '<div class="title">node ' + node + '</div><div class="cells"></div>';
    const cells = box.lastChild;
    cells.style.setProperty('--per-row', Math.min(8, D.gpus));
    for (let gpu = 0; gpu < D.gpus; gpu++) {
      const rank = node * D.gpus + gpu;
      const cell = document.createElement('div');
      if (rank < first || rank > last) {
        cell.className = 'cell idle';
        cell.textContent = 'idle';
      } else {
        cell.className = 'cell';
        cell.dataset.rank = rank;
        cell.textContent = 'r' + rank + ' ' + D.labels[rank - D.offset];
      }
      cells.appendChild(cell);
    }
    parent.appendChild(box);
  }
}

function colour() {
  const legend = document.getElementById('legend');
  if (!D.detailed) {
    legend.textContent = 'One grey cell per node. Dark border: a node holding a rank of the ' +
      'highlighted group; red outline: the node of the chosen rank.';
    return;
  }
  const axis = colourSelect.value;
  legend.innerHTML = '';
  D.colours[axis].forEach(([bg, fg], value) => {
    const swatch = document.createElement('span');
    swatch.className = 'swatch';
    swatch.style.background = bg;
    swatch.style.color = fg;
    swatch.textContent = axis + ' ' + value;
    legend.appendChild(swatch);
  });
  for (const cell of map.querySelectorAll('.cell[data-rank]')) {
    const [bg, fg] = D.colours[axis][D.axes[axis][cell.dataset.rank - D.offset]];
    cell.style.background = bg;
    cell.style.color = fg;
  }
}

function select(rank) {
  for (const cell of map.querySelectorAll('.hl, .sel')) cell.classList.remove('hl', 'sel');
  map.classList.remove('selecting');
  if (rank === null || rank < D.offset || rank >= D.offset + D.world) {
    info.textContent = 'Hover or click a ' + (D.detailed ? 'GPU' : 'node') +
      ', or type a rank, to see its group.';
    return;
  }
  const kind = kindSelect.value;
  const index = D.groups[kind];
  const group = index[rank - D.offset];
  const members = [];
  if (group >= 0) {
    for (let i = 0; i < index.length; i++) if (index[i] === group) members.push(i + D.offset);
  }
  const nodes = [...new Set(members.map(nodeOf))];
  map.classList.add('selecting');
  if (D.detailed) {
    for (const r of members) map.querySelector('.cell[data-rank="' + r + '"]').classList.add('hl');
    map.querySelector('.cell[data-rank="' + rank + '"]').classList.add('sel');
  } else {
    for (const n of nodes) map.querySelector('.cell[data-node="' + n + '"]').classList.add('hl');
    map.querySelector('.cell[data-node="' + nodeOf(rank) + '"]').classList.add('sel');
  }
  info.textContent = group < 0 ? 'rank ' + rank + ' is in no ' + kind + ' group' :
    'rank ' + rank + ': ' + kind + ' group ' + group + ', ' + members.length + ' ranks: ' +
    list(members) + '; nodes: ' + list(nodes);
}

function rankOf(cell) {
  if (cell.dataset.rank !== undefined) return Number(cell.dataset.rank);
  return Math.max(D.offset, Number(cell.dataset.node) * D.gpus);
}

build();
colour();
select(null);
map.addEventListener('mouseover', (event) => {
  const cell = event.target.closest('.cell:not(.idle)');
  if (cell && pinned === null) select(rankOf(cell));
});
map.addEventListener('click', (event) => {
  const cell = event.target.closest('.cell:not(.idle)');
  if (!cell) return;
  const rank = rankOf(cell);
  pinned = pinned === rank ? null : rank;
  select(rank);
});
kindSelect.addEventListener('change', () => select(pinned));
if (colourSelect) colourSelect.addEventListener('change', colour);
document.getElementById('rank').addEventListener('change', (event) => {
  pinned = event.target.value === '' ? null : Number(event.target.value);
  select(pinned);
});
"""


def _options(values: list[str], chosen: str) -> str:
    """``<option>`` elements for ``values``, ``chosen`` selected."""
    return "".join(
        f'<option value="{escape(v)}"{" selected" if v == chosen else ""}>{escape(v)}</option>'
        for v in values
    )


def html_page(topo: Topology, cluster: Cluster, color_by: str = "pp") -> str:
    """The whole page for ``topo`` on ``cluster`` (colour axis ``color_by`` when detailed)."""
    data = page_data(topo, cluster)
    kinds = data["kinds"]
    kind = "tp" if "tp" in kinds else kinds[0]
    colour_control = ""
    if data["detailed"]:
        axes = list(data["axes"])
        chosen = color_by if color_by in axes else "pp"
        colour_control = (
            f'<label>colour by <select id="colour">{_options(axes, chosen)}</select></label>'
        )
    last = topo.rank_offset + topo.world_size - 1
    view = "one cell per GPU" if data["detailed"] else "one cell per node (aggregated)"
    domain = data["domain"]
    where = f"{cluster.gpus_per_node} GPUs per node, {domain} per NVLink domain; {view}"
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    title = escape(str(topo))
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; \
style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<title>{title}</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>{title}</h1>
<p>{escape(where)}. Highlighted: the group of the chosen kind that holds the rank under the
pointer (click to pin it, click again to release).</p>
<div id="controls">
<label>group kind <select id="kind">{_options(kinds, kind)}</select></label>
{colour_control}
<label>rank <input id="rank" type="number" min="{topo.rank_offset}" max="{last}"></label>
</div>
<div id="info"></div>
<div id="legend"></div>
<div id="map"></div>
<script type="application/json" id="data">{payload}</script>
<script>{_SCRIPT}</script>
</body>
</html>
"""
