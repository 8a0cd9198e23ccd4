"""Per-tensor sharding metadata of an engine layout, in the engine's own names (private).

For each Hugging Face tensor of the model: its name, global shape and dtype, and which engine
ranks hold which box of it, copied into which box of which of their local tensors (the engine's
name: ``qkv_proj``, ``experts.w13_weight``). Ranks that hold the same boxes in the same local
tensor are one entry, their ranks written as runs (:func:`~topology._transfer.metadata.rank_runs`).
Tensors that the rules cut alike (same role and shape; a routed expert's own, since its holders
differ) share their entries, computed once, and ranks of one class (they hold the same of the
tensor: :meth:`~topology._refit.target.EngineTarget.rank_classes`) one :func:`holding` call: the
work is the classes of ranks times the distinct tensor kinds plus each expert's holders, not the
ranks times the tensors.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from .._engine.rules import Piece
from .._transfer.hf_weights import HFWeight
from .._transfer.metadata import DTYPES, rank_runs
from .target import Box, EngineTarget, engine_name

__all__ = ["engine_table"]


def engine_table(target: EngineTarget) -> list[dict[str, Any]]:
    """Each Hugging Face tensor's sharding in ``target``'s engine layout (see the module):
    ``name``, ``shape``, ``dtype`` (None for an itemsize not in
    :data:`~topology._transfer.metadata.DTYPES`) and ``holders``: for each group of ranks its
    ``ranks`` (world ranks, as runs), the local ``tensor`` and its local ``shape`` (padding
    included), and ``pieces``: ``{"from": box of the tensor, "to": box of the local tensor}``
    (a box is ``[start, stop]`` per dim). A rank of padding only is no holder.

    >>> from topology import Architecture, EngineLayout
    >>> llama = Architecture(1, 16, 64, 32, 4, 2, 4)
    >>> table = engine_table(EngineTarget(EngineLayout("vllm", tp=4), llama, rank_offset=4))
    >>> k = next(t for t in table if t["name"] == "model.layers.0.self_attn.k_proj.weight")
    >>> k["shape"], [(h["ranks"], h["tensor"], h["pieces"]) for h in k["holders"]][0]
    ([8, 16], ([[4, 6, 1]], 'model.layers.0.self_attn.qkv_proj.weight', \
[{'from': [[0, 4], [0, 16]], 'to': [[4, 8], [0, 16]]}]))
    """
    classes: dict[Hashable, list[tuple[str, list[int], list[list[int]], list[Any]]]] = {}
    table = []
    for hf in target.weights:
        key = (hf.role, hf.shape, hf.expert)  # a routed expert's holders follow from its index
        found = classes.get(key)
        if found is None:
            found = classes[key] = _holders(target, hf)
        table.append(
            {
                "name": hf.name,
                "shape": list(hf.shape),
                "dtype": DTYPES.get(hf.itemsize),
                "holders": [
                    {
                        "ranks": runs,
                        "tensor": engine_name(hf.name, local),
                        "shape": shape,
                        "pieces": pieces,
                    }
                    for local, shape, runs, pieces in found
                ],
            }
        )
    return table


def _holders(
    target: EngineTarget, hf: HFWeight
) -> list[tuple[str, list[int], list[list[int]], list[Any]]]:
    """``(local tensor, its shape, world rank runs, pieces)`` per group of the ranks that may hold
    ``hf`` (:meth:`EngineTarget.rank_classes`) holding the same boxes of it in the same local
    tensor, in the order of their first rank (one :func:`holding` per class of ranks)."""
    groups: dict[tuple[str, tuple[int, ...], tuple[Piece, ...]], list[tuple[int, ...]]] = {}
    for _, rank, members in target.rank_classes(hf):
        held = target.held(hf, rank)
        if held.pieces:
            groups.setdefault((held.param, held.shape, held.pieces), []).append(members)
    return [
        (
            local,
            list(shape),
            rank_runs(_merged(members)),
            [{"from": _box(p.source), "to": _box(p.target)} for p in pieces],
        )
        for (local, shape, pieces), members in groups.items()
    ]


def _merged(members: list[tuple[int, ...]]) -> Sequence[int]:
    """The ranks of some classes of ranks (each ascending), ascending."""
    return members[0] if len(members) == 1 else sorted(r for ranks in members for r in ranks)


def _box(box: Box) -> list[list[int]]:
    return [list(span) for span in box]
