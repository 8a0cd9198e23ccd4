"""Megatron's pipeline split options and the decoder layers each (stage, chunk) builds.

Megatron places ``num_layers`` decoder layers on ``pp`` stages of ``vpp`` virtual chunks each
(``get_num_layers_to_build`` and ``get_transformer_layer_offset`` in megatron-core): model chunk
``c = v * pp + p`` (chunk ``v`` of stage ``p``) builds ``n[p][v]`` layers, starting where the
chunks before it in that order end. :class:`PipelineSplit` says how ``n`` is chosen:

- nothing given: ``n = num_layers / (pp * vpp)`` everywhere; Megatron refuses a split
  ``pp`` does not divide (and ``vpp`` does not divide per stage).
- ``first_stage_layers`` / ``last_stage_layers`` (``num_layers_in_first_pipeline_stage``,
  ``num_layers_in_last_pipeline_stage``): the first / last stage holds that many (over its
  ``vpp`` chunks), the middle stages share the rest evenly.
- ``account_for_embedding`` / ``account_for_loss`` (``account_for_embedding_in_pipeline_split``,
  ``account_for_loss_in_pipeline_split``): the embedding (loss) counts as one more layer, in the
  first (last) chunk of the first (last) stage, which builds one decoder layer fewer.
- ``layout`` (``pipeline_model_parallel_layout``): the chunks' layers letter by letter.

>>> PipelineSplit(first_stage_layers=3, last_stage_layers=2).layers(11, pp=4)
(((0, 1, 2),), ((3, 4, 5),), ((6, 7, 8),), ((9, 10),))
>>> PipelineSplit(layout="Et|tt|t|tL").layers(5, pp=2, vpp=2)
(((0,), (3,)), ((1, 2), (4,)))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..._args import check_size, show
from ..._errors import TopologyError
from ..pipeline import check_layers
from .counts import even_counts, layout_counts, stage_counts
from .layout import chunks_of, layout_string

__all__ = ["MEGATRON_NAMES", "PipelineSplit", "check_split", "layers_of"]

MEGATRON_NAMES = {
    "num_layers_in_first_pipeline_stage": "first_stage_layers",
    "num_layers_in_last_pipeline_stage": "last_stage_layers",
    "account_for_embedding_in_pipeline_split": "account_for_embedding",
    "account_for_loss_in_pipeline_split": "account_for_loss",
    "pipeline_model_parallel_layout": "layout",
}
"""Megatron's ``TransformerConfig`` field of each of ours."""

Layers = tuple[tuple[tuple[int, ...], ...], ...]


def _stage_layers(instance: object, attribute: Any, value: object) -> None:
    if value is not None:
        check_layers(attribute.name, value)


def _flag(instance: object, attribute: Any, value: object) -> None:
    if type(value) is not bool:
        raise TopologyError(
            f"{attribute.name} must be True or False, got {show(value)} "
            f"({type(value).__name__}); give a bool"
        )


def _layout(instance: object, attribute: Any, value: object) -> None:
    if value is not None:
        chunks_of(value)  # type: ignore[arg-type]  # chunks_of checks the type


@attrs.frozen
class PipelineSplit:
    """How Megatron splits the decoder layers over pipeline stages: its config's options.

    Give at most one kind of option, as Megatron's ``TransformerConfig`` wants:

    - nothing: Megatron's even split, ``num_layers / (pp * vpp)`` layers per chunk (Megatron
      refuses a split ``pp`` does not divide, or ``vpp`` per stage).
    - ``first_stage_layers`` / ``last_stage_layers`` (``num_layers_in_first_pipeline_stage``,
      ``num_layers_in_last_pipeline_stage``): that many on the first / last stage, over its
      ``vpp`` chunks; the middle stages share the rest evenly.
    - ``account_for_embedding`` / ``account_for_loss`` (``account_for_embedding_in_pipeline_split``,
      ``account_for_loss_in_pipeline_split``): the embedding (loss) counts as one more layer of
      the even split, in the first (last) chunk of the first (last) stage.
    - ``layout`` (``pipeline_model_parallel_layout``): Megatron's layout string, chunk by chunk
      (``E`` embedding, ``t`` decoder layer, ``m`` MTP, ``L`` loss, ``|`` between chunks in
      Megatron's order, ``x*n`` and ``(...)*n`` repeats), e.g. ``"Et*4|(t*4|)*14,tmL"``.

    What needs ``num_layers``, ``pp`` and ``vpp`` is checked by :meth:`layers`, which gives every
    (stage, chunk)'s layers exactly as megatron-core's ``get_transformer_layer_offset`` and
    ``get_num_layers_to_build`` do (tested against 0.19.2).

    >>> PipelineSplit(first_stage_layers=3, last_stage_layers=2)
    PipelineSplit(first_stage_layers=3, last_stage_layers=2)
    >>> PipelineSplit(first_stage_layers=3, account_for_loss=True)
    Traceback (most recent call last):
    topology._errors.TopologyError: first_stage_layers(3) / last_stage_layers(None) and \
account_for_embedding(False) / account_for_loss(True) cannot be given together (Megatron refuses \
it); give stage layer counts or accounting, not both
    """

    first_stage_layers: int | None = attrs.field(default=None, validator=_stage_layers)
    last_stage_layers: int | None = attrs.field(default=None, validator=_stage_layers)
    account_for_embedding: bool = attrs.field(default=False, validator=_flag)
    account_for_loss: bool = attrs.field(default=False, validator=_flag)
    layout: str | None = attrs.field(default=None, validator=_layout)

    def __attrs_post_init__(self) -> None:
        counts = self.first_stage_layers is not None or self.last_stage_layers is not None
        accounting = self.account_for_embedding or self.account_for_loss
        if counts and accounting:
            raise TopologyError(
                f"first_stage_layers({self.first_stage_layers}) / last_stage_layers("
                f"{self.last_stage_layers}) and account_for_embedding("
                f"{self.account_for_embedding}) / account_for_loss({self.account_for_loss}) "
                "cannot be given together (Megatron refuses it); give stage layer counts or "
                "accounting, not both"
            )
        if self.layout is not None and (counts or accounting):
            raise TopologyError(
                f"layout {show(self.layout)} cannot be given with stage layer counts or "
                "accounting (Megatron refuses it); give the layout alone"
            )

    @classmethod
    def from_megatron(cls, config: Mapping[str, Any]) -> PipelineSplit:
        """The split of a Megatron config (a ``TransformerConfig``'s fields as a mapping, or a
        NeMo-RL / Megatron-Bridge ``megatron_cfg``): its five pipeline-split keys, others ignored;
        a layout in Megatron's list form (``[["embedding", "decoder"], ...]``) becomes a string.

        >>> PipelineSplit.from_megatron({"num_layers_in_first_pipeline_stage": 3, "tp": 8})
        PipelineSplit(first_stage_layers=3)
        """
        if not isinstance(config, Mapping):
            raise TopologyError(
                f"config must be a mapping of Megatron's config fields, got {show(config)}; "
                "give a dict such as vars(transformer_config)"
            )
        given = {
            ours: config[theirs] for theirs, ours in MEGATRON_NAMES.items() if theirs in config
        }
        if isinstance(given.get("layout"), (list, tuple)):
            given["layout"] = layout_string(given["layout"])
        for flag in ("account_for_embedding", "account_for_loss"):
            if given.get(flag) is None:
                given.pop(flag, None)
        return cls(**given)

    def to_megatron(self) -> dict[str, Any]:
        """Megatron's ``TransformerConfig`` fields for this split (what :meth:`from_megatron`
        reads).

        >>> PipelineSplit(account_for_loss=True).to_megatron()["account_for_loss_in_pipeline_split"]
        True
        """
        return {theirs: getattr(self, ours) for theirs, ours in MEGATRON_NAMES.items()}

    def __repr__(self) -> str:
        given = [
            f"{a.name}={getattr(self, a.name)!r}"
            for a in attrs.fields(PipelineSplit)
            if getattr(self, a.name) != a.default
        ]
        return f"PipelineSplit({', '.join(given)})"

    def __str__(self) -> str:
        """``even``, ``first 3, last 2``, ``embedding, loss`` or ``layout '...'``."""
        if self.layout is not None:
            return f"layout {self.layout!r}"
        parts = [
            f"{word} {n}"
            for word, n in (("first", self.first_stage_layers), ("last", self.last_stage_layers))
            if n is not None
        ]
        parts += ["embedding"] if self.account_for_embedding else []
        parts += ["loss"] if self.account_for_loss else []
        return ", ".join(parts) or "even"

    def layers(self, num_layers: int, pp: int, vpp: int | None = None) -> Layers:
        """The 0-based decoder layers of every stage's virtual chunks: ``[stage][chunk]``.

        Algorithm: chunk ``v`` of stage ``p`` is model chunk ``c = v * pp + p``; it builds
        ``n[p][v]`` layers (see the module) from ``sum of n over the chunks before c``.

        Args:
            num_layers: the model's decoder layers.
            pp: pipeline stages.
            vpp: virtual chunks per stage (None: one).

        Raises:
            TopologyError: whatever Megatron refuses, with the arithmetic and the fix.

        >>> PipelineSplit(account_for_embedding=True, account_for_loss=True).layers(6, pp=4)
        (((0,),), ((1, 2),), ((3, 4),), ((5,),))
        """
        check_layers("num_layers", num_layers)
        check_size("pp", pp)
        if vpp is not None:
            check_size("vpp", vpp)
            if pp == 1 and vpp > 1:
                raise TopologyError(
                    f"vpp({vpp}) needs pipeline stages to interleave, but pp is 1; "
                    "drop vpp or use pp > 1"
                )
        return layers_of(self._counts(num_layers, pp, vpp or 1))

    def _counts(self, num_layers: int, pp: int, chunks: int) -> list[list[int]]:
        if self.layout is not None:
            return layout_counts(self.layout, num_layers, pp, chunks)
        if self.first_stage_layers is not None or self.last_stage_layers is not None:
            return stage_counts(
                self.first_stage_layers, self.last_stage_layers, num_layers, pp, chunks
            )
        return even_counts(
            self.account_for_embedding, self.account_for_loss, num_layers, pp, chunks
        )


def check_split(value: object, name: str = "split") -> PipelineSplit | None:
    """``value`` if it is a :class:`PipelineSplit` or None, else raise.

    >>> check_split(3, "src_split")
    Traceback (most recent call last):
    topology._errors.TopologyError: src_split must be a PipelineSplit or None, got 3 (int); \
give PipelineSplit(...), e.g. PipelineSplit(first_stage_layers=3, last_stage_layers=2)
    """
    if value is not None and not isinstance(value, PipelineSplit):
        raise TopologyError(
            f"{name} must be a PipelineSplit or None, got {show(value)} "
            f"({type(value).__name__}); give PipelineSplit(...), e.g. "
            "PipelineSplit(first_stage_layers=3, last_stage_layers=2)"
        )
    return value


def layers_of(counts: list[list[int]]) -> Layers:
    """The layers of every ``[stage][chunk]`` from how many each builds: chunk ``v`` of stage
    ``p`` is model chunk ``v * pp + p`` and takes the next ``counts[p][v]`` layers.

    >>> layers_of([[1, 1], [2, 1]])
    (((0,), (3,)), ((1, 2), (4,)))
    """
    pp, chunks = len(counts), len(counts[0])
    start = [[0] * chunks for _ in range(pp)]
    at = 0
    for v in range(chunks):
        for p in range(pp):
            start[p][v], at = at, at + counts[p][v]
    return tuple(
        tuple(tuple(range(start[p][v], start[p][v] + counts[p][v])) for v in range(chunks))
        for p in range(pp)
    )
