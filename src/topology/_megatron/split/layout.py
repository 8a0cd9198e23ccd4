"""Megatron's ``pipeline_model_parallel_layout`` string, read into stages of layer letters.

A layout lists the model chunks in Megatron's order (every stage of virtual chunk 0, then every
stage of chunk 1, ...), separated by ``|``; in each, ``E`` is the embedding, ``t`` a decoder
(transformer) layer, ``m`` a multi-token-prediction layer and ``L`` the loss. ``x*n`` repeats a
letter (or a ``|``), ``(...)*n`` repeats a group (no nesting), commas are cosmetic.

>>> chunks_of("Et*3|(tt|)*2,mL")
('Ettt', 'tt', 'tt', 'mL')
>>> chunks_of("E|t*0|L")
('E', '', 'L')
"""

from __future__ import annotations

from ..._args import show
from ..._errors import TopologyError

__all__ = ["LETTERS", "chunks_of", "layout_string"]

LETTERS = "ELtm"
"""The layer letters Megatron's layout strings use (embedding, loss, decoder, MTP)."""

MAX_LETTERS = 2**20
"""An unrolled layout longer than this is refused (it lists every layer)."""


def _fail(layout: str, why: str, fix: str) -> TopologyError:
    return TopologyError(f"pipeline layout {show(layout)} {why}; {fix}")


def _count(text: str, at: int) -> tuple[int, int]:
    """The repeat count ``*n`` at ``text[at:]`` (1 when there is none) and where it ends."""
    if at + 1 < len(text) and text[at] == "*" and text[at + 1].isascii() and text[at + 1].isdigit():
        end = at + 1
        while end < len(text) and text[end].isascii() and text[end].isdigit():
            end += 1
        return int(text[at + 1 : end]), end
    return 1, at


def _unroll(layout: str, text: str) -> str:
    """``text`` with its ``x*n`` and ``(...)*n`` written out."""
    out: list[str] = []
    size, at = 0, 0
    while at < len(text):
        if text[at] == "(":
            close = text.find(")", at)
            if close < 0 or "(" in text[at + 1 : close] or close == at + 1:
                raise _fail(layout, "has an unclosed, nested or empty group", "write (...)*n")
            times, end = _count(text, close + 1)
            if end == close + 1:
                raise _fail(layout, "has a group without a count", "write (...)*n")
            body, at = _unroll(layout, text[at + 1 : close]), end
        elif text[at] == ")":
            raise _fail(layout, "closes a group it never opened", "write (...)*n")
        else:
            times, end = _count(text, at + 1)
            body, at = text[at], end
        size += len(body) * times
        if size > MAX_LETTERS:
            raise _fail(layout, f"unrolls to more than {MAX_LETTERS} letters", "write fewer")
        out.append(body * times)
    return "".join(out)


def chunks_of(layout: str) -> tuple[str, ...]:
    """The letters of every model chunk of ``layout``, in Megatron's order (see the module).

    Raises:
        TopologyError: an unknown letter, or a group or count Megatron cannot read.
    """
    if not isinstance(layout, str) or not layout:
        raise TopologyError(
            f"pipeline layout must be a non-empty string such as 'Et*3|(t*4|)*14,tmL', got "
            f"{show(layout)}; give Megatron's pipeline_model_parallel_layout string"
        )
    unrolled = _unroll(layout, layout.replace(",", ""))
    bad = sorted(set(unrolled) - set(LETTERS + "|"))
    if bad:
        raise _fail(
            layout,
            f"has the character {show(bad[0])}",
            "use E (embedding), t (decoder), m (MTP), L (loss), | between chunks, x*n, (...)*n",
        )
    return tuple(unrolled.split("|"))


_LETTER_OF = {"embedding": "E", "loss": "L", "decoder": "t", "mtp": "m"}


def layout_string(rows: object) -> str:
    """Megatron's list form of a layout (one list of layer names per chunk, as Megatron-Bridge's
    recipes write it) as the string form.

    >>> layout_string([["embedding", "decoder"], ["decoder", "mtp", "loss"]])
    'Et|tmL'
    """
    if not isinstance(rows, (list, tuple)) or not rows:
        raise TopologyError(
            f"pipeline layout list must be a non-empty list of lists of layer names, got "
            f"{show(rows)}; give e.g. [['embedding', 'decoder'], ['decoder', 'loss']]"
        )
    chunks = []
    for row in rows:
        if not isinstance(row, (list, tuple)):
            raise TopologyError(
                f"pipeline layout list row {show(row)} is not a list of layer names; give one "
                "list per chunk"
            )
        letters = []
        for name in row:
            letter = _LETTER_OF.get(name.strip().lower()) if isinstance(name, str) else None
            if letter is None:
                raise TopologyError(
                    f"pipeline layout list names the layer {show(name)}; use embedding, "
                    "decoder, mtp or loss"
                )
            letters.append(letter)
        chunks.append("".join(letters))
    return "|".join(chunks)
