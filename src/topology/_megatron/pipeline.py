"""The pipeline view of one rank and virtual-pipeline layer placement."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from .._args import check_size, show
from .._errors import TopologyError
from .._fields import flag, whole
from .._layout.groups import Ranks

__all__ = ["MAX_LAYERS", "Pipeline", "check_layers", "virtual_layers"]

MAX_LAYERS = 2**20
"""``layers()`` lists every layer index, so the count is bounded."""


def check_layers(name: str, value: object) -> int:
    """Return ``value`` if it is a layer count: a positive int up to :data:`MAX_LAYERS`.

    >>> check_layers("num_layers", 2**21)
    Traceback (most recent call last):
    topology._errors.TopologyError: num_layers must be at most 1048576 (2**20), the most layers \
rank-topology places, got 2097152
    """
    return check_size(name, value, at_most=MAX_LAYERS, why="the most layers rank-topology places")


def _as_ranks(ranks: Sequence[int]) -> Ranks:
    return Ranks.of(ranks)


@attrs.frozen
class Pipeline:
    """Where one rank sits in its pipeline, with Megatron's wrap-around neighbours.

    ``ranks`` is the pipeline as a lazy :class:`Ranks` (it equals the tuple of its ranks), so
    a view costs O(1) memory however many stages there are.

    >>> from topology import Topology
    >>> view = Topology(16, tp=2, pp=4).pipeline(12)
    >>> view.stage, view.ranks, view.next, view.prev, view.is_last, view.in_embedding
    (3, (0, 4, 8, 12), 0, 8, True, True)
    """

    rank: int = attrs.field(validator=whole(0))
    stage: int = attrs.field(validator=whole(0))
    ranks: Ranks = attrs.field(converter=_as_ranks)
    in_embedding: bool = attrs.field(validator=flag)
    in_position_embedding: bool = attrs.field(validator=flag)

    def __attrs_post_init__(self) -> None:
        if not self.stage < len(self.ranks) or self.ranks[self.stage] != self.rank:
            raise TopologyError(
                f"Pipeline stage {show(self.stage)} of ranks {show(self.ranks)} is not rank "
                f"{show(self.rank)}; give the rank's own stage in its pipeline"
            )

    @property
    def num_stages(self) -> int:
        """How many stages the pipeline has (pp)."""
        return len(self.ranks)

    @property
    def first(self) -> int:
        """The rank of the first stage of this pipeline."""
        return self.ranks[0]

    @property
    def last(self) -> int:
        """The rank of the last stage of this pipeline."""
        return self.ranks[-1]

    @property
    def is_first(self) -> bool:
        """True on the first stage."""
        return self.stage == 0

    @property
    def is_last(self) -> bool:
        """True on the last stage."""
        return self.stage == len(self.ranks) - 1

    @property
    def next(self) -> int:
        """The rank of the following stage; the last stage's next is the first (wrap-around)."""
        return self.ranks[(self.stage + 1) % len(self.ranks)]

    @property
    def prev(self) -> int:
        """The rank of the preceding stage; the first stage's prev is the last (wrap-around)."""
        return self.ranks[(self.stage - 1) % len(self.ranks)]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict of every fact above; ``ranks`` is a list up to 1024 stages, else a
        summary (``size``, ``first``, ``last``, ``runs``; see docs/cli.md)."""
        return {
            "rank": self.rank,
            "stage": self.stage,
            "num_stages": self.num_stages,
            "ranks": self.ranks.to_json(),
            "first": self.first,
            "last": self.last,
            "is_first": self.is_first,
            "is_last": self.is_last,
            "next": self.next,
            "prev": self.prev,
            "in_embedding": self.in_embedding,
            "in_position_embedding": self.in_position_embedding,
        }


def virtual_layers(
    stage: int, num_layers: int, pp: int, vpp: int | None
) -> tuple[tuple[int, ...], ...]:
    """The 0-based layer indices each virtual chunk of ``stage`` holds (interleaved schedule).

    Algorithm: the model is cut into ``pp * vpp`` chunks of ``num_layers / (pp * vpp)`` layers;
    chunk ``v`` of stage ``p`` holds model chunk ``v * pp + p``.

    >>> virtual_layers(0, 16, pp=4, vpp=2)
    ((0, 1), (8, 9))
    >>> virtual_layers(1, 8, pp=2, vpp=None)
    ((4, 5, 6, 7),)
    """
    chunks = vpp or 1
    if type(stage) is not int or not 0 <= stage < pp:
        raise TopologyError(f"stage {show(stage)} is out of range; valid stages: 0 to {pp - 1}")
    check_layers("num_layers", num_layers)
    if num_layers % (pp * chunks):
        raise TopologyError(
            f"num_layers {num_layers} is not divisible by pp({pp}) * vpp({chunks}) = "
            f"{pp * chunks}; use a positive multiple of {pp * chunks}"
        )
    per_chunk = num_layers // (pp * chunks)
    return tuple(
        tuple(range((v * pp + stage) * per_chunk, (v * pp + stage + 1) * per_chunk))
        for v in range(chunks)
    )
