"""Per-tensor sharding metadata: each weight's name, shape, dtype and which ranks hold which
slice of it in one layout, compactly (private).

The ranks of a shard are written as runs ``[start, stop, step]`` (Python's ``range``): a
layout's shard is a strided set of ranks (``grid.matching``), so one to a few runs say what a
list of thousands of ranks would. Weights that sit alike (one :func:`placement_key`) share their
shards' ranks, computed once.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from .._megatron.split.split import PipelineSplit
from .._megatron.topology import Topology
from .param_placement import PlacementKeys, param_placement
from .params import Param

__all__ = ["DTYPES", "rank_runs", "shard_table"]

DTYPES = {1: "float8_e4m3fn", 2: "bfloat16", 4: "float32", 8: "float64"}
"""The dtype each ``Param.itemsize`` stands for in the weight lists (:func:`weights` gives
bf16, 2 bytes; another size is the caller's): the ``dtype`` of :func:`shard_table`."""


def rank_runs(ranks: Sequence[int]) -> list[list[int]]:
    """Ascending ``ranks`` as ``[start, stop, step]`` runs (each a ``range``), greedily longest.

    >>> rank_runs([0, 8, 16, 24, 25])
    [[0, 25, 8], [25, 26, 1]]
    >>> rank_runs([3])
    [[3, 4, 1]]
    """
    runs: list[list[int]] = []
    i, n = 0, len(ranks)
    while i < n:
        start = ranks[i]
        if i + 1 == n:
            runs.append([start, start + 1, 1])
            break
        step = ranks[i + 1] - start
        j = i + 1
        while j + 1 < n and ranks[j + 1] - ranks[j] == step:
            j += 1
        runs.append([start, ranks[j] + 1, step])
        i = j + 1
    return runs


def shard_table(
    topology: Topology,
    params: Sequence[Param],
    *,
    num_layers: int | None = None,
    pipeline_split: PipelineSplit | None = None,
) -> list[dict[str, Any]]:
    """Each weight's sharding in ``topology``: ``name``, global ``shape``, ``dtype`` (None for
    an itemsize not in :data:`DTYPES`), ``dim`` (the cut dim, None: held whole) and ``shards``:
    for each shard its ``ranks`` (:func:`rank_runs`), its ``ranges`` of the cut dim (in the
    holder's local order) and ``rows`` (its range of dim 0 under GTP of a row-parallel weight,
    else None).

    Args:
        topology: the layout (its ``rank_offset`` included in the ranks).
        params: the weights.
        num_layers: the model's layers (default: one more than the largest ``param.layer``).
        pipeline_split: the layout's split (:class:`PipelineSplit`; None: even).

    >>> w = Param("w", (8, 4), sharding="column", layer=0)
    >>> shard_table(Topology(4, tp=2), [w])[0]["shards"]
    [{'ranks': [[0, 3, 2]], 'ranges': [[0, 4]], 'rows': None}, {'ranks': [[1, 4, 2]], \
'ranges': [[4, 8]], 'rows': None}]
    """
    if num_layers is None:
        num_layers = 1 + max((p.layer for p in params if p.layer is not None), default=0)
    keys = PlacementKeys(topology, num_layers, pipeline_split)
    classes: dict[Hashable, list[dict[str, Any]]] = {}
    table = []
    for param in params:
        key = keys.key(param)
        shards = classes.get(key)
        if shards is None:
            placed = param_placement(
                topology, param, num_layers=num_layers, pipeline_split=pipeline_split
            )
            shards = classes[key] = [
                {
                    "ranks": rank_runs(sorted(shard.ranks)),
                    "ranges": [list(r) for r in shard.ranges],
                    "rows": None if shard.rows is None else list(shard.rows),
                }
                for shard in placed.shards
            ]
        table.append(
            {
                "name": param.name,
                "shape": list(param.shape),
                "dtype": DTYPES.get(param.itemsize),
                "dim": param.cut_dim if param.row.dim is not None else None,
                "shards": shards,
            }
        )
    return table
