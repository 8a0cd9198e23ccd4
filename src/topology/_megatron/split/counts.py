"""How many decoder layers each (stage, virtual chunk) builds under each kind of split (private).

Each function returns ``n[stage][chunk]`` or raises what megatron-core 0.19 refuses (in its
``TransformerConfig`` checks or in ``get_num_layers_to_build``), with four documented differences
(``tests/test_pipeline_split_megatron.py`` pins each against 0.19.2):

- stage counts that place more than ``num_layers`` (a negative middle): Megatron accepts them
  and builds overlapping chunks; refused here.
- both stage counts at pp 1: Megatron builds the last count and ignores the first; refused here.
- a layout whose ``E`` is not the first letter of the first chunk or whose ``L`` is not the last
  of the last chunk (Megatron only wants them first and last overall): refused here, since the
  transfer keeps the embedding and the output layer on the first and last stage.
- pp 2 with vpp and both stage counts: Megatron's ``get_transformer_layer_offset`` divides by
  its zero middle stages on stage 1; here stage 1 starts where stage 0 ends, as its counts say.
"""

from __future__ import annotations

from ..._args import show
from ..._errors import TopologyError
from .layout import chunks_of

__all__ = ["even_counts", "layout_counts", "stage_counts"]

FIX = "give first_stage_layers / last_stage_layers or a layout"


def even_counts(
    embedding: bool, loss: bool, num_layers: int, pp: int, chunks: int
) -> list[list[int]]:
    """Megatron's even split, the embedding and loss counted as layers when asked."""
    total = num_layers + embedding + loss
    shown = f"num_layers {num_layers}" + " + 1 (embedding)" * embedding + " + 1 (loss)" * loss
    if embedding or loss:
        shown += f" = {total}"
    if total % pp:
        raise TopologyError(f"{shown} is not divisible by pp({pp}) (Megatron's even split); {FIX}")
    if (total // pp) % chunks:
        raise TopologyError(
            f"{shown} over pp({pp}) is {total // pp} layers per stage, not divisible by "
            f"vpp({chunks}); {FIX}, or a vpp that divides {total // pp}"
        )
    each = total // pp // chunks
    counts = [[each] * chunks for _ in range(pp)]
    counts[0][0] -= embedding
    counts[-1][-1] -= loss
    return counts


def stage_counts(
    first: int | None, last: int | None, num_layers: int, pp: int, chunks: int
) -> list[list[int]]:
    """``first`` (``last``) layers on the first (last) stage, the rest evenly in between."""
    given = f"first_stage_layers({first}) / last_stage_layers({last})"
    if pp == 1 and first is not None and last is not None:
        raise TopologyError(
            f"{given} both name the one stage of pp(1); give only first_stage_layers="
            f"{num_layers}, or none"
        )
    for name, n in (("first_stage_layers", first), ("last_stage_layers", last)):
        if n is not None and n % chunks:
            raise TopologyError(
                f"{name} {n} is not divisible by vpp({chunks}), the stage's chunks; give a "
                f"multiple of {chunks}"
            )
    middle = num_layers - (first or 0) - (last or 0)
    stages = pp - (first is not None) - (last is not None)
    if middle < 0:
        raise TopologyError(
            f"{given} place {num_layers - middle} layers, more than num_layers {num_layers}; "
            f"give counts that sum to at most {num_layers}"
        )
    if not stages and middle:
        raise TopologyError(
            f"{given} leave {middle} of num_layers {num_layers} layers and no middle stage of "
            f"pp({pp}); give counts that sum to {num_layers}"
        )
    if stages and (not middle or middle % stages):
        raise TopologyError(
            f"{given} leave {middle} of num_layers {num_layers} layers for {stages} middle "
            f"stages of pp({pp}), not an even split; give counts that leave a positive "
            f"multiple of {stages}"
        )
    each = middle // stages if stages else 0
    if each % chunks:
        raise TopologyError(
            f"{given} leave {middle} layers over {stages} middle stages, {each} each, not "
            f"divisible by vpp({chunks}); give counts that leave a multiple of "
            f"{stages * chunks} layers"
        )
    counts = [[each // chunks] * chunks for _ in range(pp)]
    if first is not None:
        counts[0] = [first // chunks] * chunks
    if last is not None:
        counts[-1] = [last // chunks] * chunks
    return counts


def _layout_error(layout: str, why: str, fix: str) -> TopologyError:
    return TopologyError(f"pipeline layout {show(layout)} {why}; {fix}")


def layout_counts(layout: str, num_layers: int, pp: int, chunks: int) -> list[list[int]]:
    """The decoder letters (``t``) of each chunk of Megatron's layout string."""
    found = chunks_of(layout)
    if len(found) != pp * chunks:
        times = f"pp({pp}) * {len(found) // pp} chunks" if len(found) % pp == 0 else ""
        raise _layout_error(
            layout,
            f"has {len(found)} chunks, not pp({pp}) * vpp({chunks}) = {pp * chunks}",
            f"give vpp={len(found) // pp}, as its {times} say"
            if times and len(found) > pp
            else f"give {pp * chunks} chunks separated by |",
        )
    flat = "".join(found)
    if flat.count("E") != 1 or flat.count("L") != 1:
        raise _layout_error(
            layout,
            f"has {flat.count('E')} E and {flat.count('L')} L",
            "give one embedding E and one loss L",
        )
    if not found[0].startswith("E") or not found[-1].endswith("L"):
        raise _layout_error(
            layout,
            "does not start with E in the first chunk and end with L in the last",
            "put the embedding first and the loss last (the transfer places them there)",
        )
    if flat.count("t") != num_layers:
        raise _layout_error(
            layout,
            f"has {flat.count('t')} decoder layers (t), not num_layers {num_layers}",
            f"give {num_layers} t",
        )
    _check_mtp(layout, found, pp, chunks)
    return [[found[v * pp + p].count("t") for v in range(chunks)] for p in range(pp)]


def _check_mtp(layout: str, found: tuple[str, ...], pp: int, chunks: int) -> None:
    """Megatron's rules for MTP layers (``m``): after every decoder layer, all in the last
    virtual chunk of one stage."""
    flat = "".join(found)
    if "m" not in flat:
        return
    holding = [c for c, letters in enumerate(found) if "m" in letters]
    if "t" in flat[flat.index("m") :]:
        raise _layout_error(layout, "has a decoder layer after an MTP layer", "put m after t")
    if len(holding) > 1 or holding[0] // pp != chunks - 1:
        raise _layout_error(
            layout,
            f"has MTP layers (m) in chunks {holding} of pp({pp}) * vpp({chunks})",
            "put every m in one stage's last virtual chunk",
        )
