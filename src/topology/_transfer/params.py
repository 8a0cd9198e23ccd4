"""Param: one weight of a model, and how Megatron shards it (private).

Every fact about a sharding lives in its row of :data:`SHARDINGS`: which grid holds it
(``dense``: tp, cp, dp, pp; ``expert``: etp, ep, edp, pp) and which tensor dim the tensor-parallel
axis cuts (``None``: held whole). Fused sub-tensors (QKV, gate-up) are ``parts`` of the cut dim:
the tensor-parallel split applies to each part, so shard ``a`` of ``T`` holds slice ``a`` of
every part, in part order (Megatron's fused ``linear_fc1`` keeps ``[gate_a; up_a]`` on rank
``a``; our ``ColumnParallelLinear(stride=2)`` is the same with two equal parts).

>>> Param("decoder.0.mlp.fc1", (2 * 64, 32), sharding="column", parts=(64, 64), layer=0).cut_dim
0
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from .._args import check_size, show
from .._errors import TopologyError
from .._fields import LIMIT, LIMIT_WHY, text, whole

__all__ = ["POSITIONS", "SHARDINGS", "Param", "Sharding", "sibling"]

Record = TypeVar("Record")


@attrs.frozen
class Sharding:
    """One row of the sharding table: the grid that holds a weight and the dim tp cuts."""

    name: str
    grid: str
    dim: int | None

    @property
    def tp_axis(self) -> str:
        """The grid axis that cuts the weight: ``tp`` on the dense grid, ``etp`` on the expert."""
        return "etp" if self.grid == "expert" else "tp"

    @property
    def gtp_axis(self) -> str:
        """Megatron's GTP (weight-remat) axis over this grid: ``gtp`` dense, ``egtp`` expert."""
        return "egtp" if self.grid == "expert" else "gtp"


SHARDINGS = {
    row.name: row
    for row in (
        Sharding("replicated", "dense", None),
        Sharding("column", "dense", 0),
        Sharding("row", "dense", 1),
        Sharding("vocab", "dense", 0),
        Sharding("expert-column", "expert", 0),
        Sharding("expert-row", "expert", 1),
        Sharding("expert-replicated", "expert", None),
    )
}
"""Megatron's weight shardings: column-parallel (out features, dim 0), row-parallel (in features,
dim 1), vocab-parallel (the embedding / output table's rows), their expert versions, and whole
(``expert-replicated``: an expert's weight that etp does not cut, such as its ``linear_fc2``
bias, held whole by every rank of the expert's ep coordinate)."""

POSITIONS = ("first", "last", "tied")
"""Where a weight outside the transformer layers lives: the first stage (embedding), the last
(final norm, output layer), or the embedding stages (tied word embeddings: first and last)."""


def _shape(instance: Any, attribute: Any, value: Any) -> None:
    if type(value) is not tuple or not value:
        raise TopologyError(
            f"Param.shape must be a non-empty tuple of sizes, got {show(value)}; "
            "give the global shape, e.g. (4096, 1024)"
        )
    for dim, size in enumerate(value):
        check_size(f"Param.shape[{dim}]", size, at_most=LIMIT, why=LIMIT_WHY)


def _choice(choices: tuple[str, ...]) -> Any:
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if value not in choices:
            raise TopologyError(
                f"Param.{attribute.name} must be one of {', '.join(choices)}, got {show(value)}"
            )

    return check


def _optional_index(instance: Any, attribute: Any, value: Any) -> None:
    if value is not None:
        whole(0)(instance, attribute, value)


def _as_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


@attrs.frozen
class Param:
    """One weight: its name, global shape, bytes per element, sharding and where it lives.

    Args:
        name: the weight's name (a label; not parsed).
        shape: the global (unsharded) shape.
        itemsize: bytes per element (2 for bf16).
        sharding: a row of :data:`SHARDINGS`.
        parts: sizes of the fused sub-tensors along the cut dim, summing to its length
            (``None``: one part). The tensor-parallel split applies to each part.
        layer: the 0-based transformer layer; ``None`` for a weight outside the layers.
        position: for ``layer=None``, one of :data:`POSITIONS`.
        expert, num_experts: for an expert sharding, this expert's index and the experts of its
            layer (the ep axis holds ``num_experts / ep`` consecutive experts per rank).

    Raises:
        TopologyError: a field out of range, ``parts`` not summing to the cut dim, an expert
            sharding without its expert (or a dense one with it), or an expert outside a layer.
    """

    name: str = attrs.field(validator=text)
    shape: tuple[int, ...] = attrs.field(converter=_as_tuple, validator=_shape)
    itemsize: int = attrs.field(default=2, validator=whole(1))
    sharding: str = attrs.field(default="replicated", validator=_choice(tuple(SHARDINGS)))
    parts: tuple[int, ...] | None = attrs.field(default=None, converter=_as_tuple)
    layer: int | None = attrs.field(default=None, validator=_optional_index)
    position: str = attrs.field(default="first", validator=_choice(POSITIONS))
    expert: int | None = attrs.field(default=None, validator=_optional_index)
    num_experts: int | None = attrs.field(default=None, validator=_optional_index)

    def __attrs_post_init__(self) -> None:
        _ = self.cut_dim  # refuses a cut dim the shape lacks
        self._check_parts()
        self._check_expert()

    def _check_parts(self) -> None:
        if self.parts is None:
            return
        length = self.shape[self.cut_dim]
        if type(self.parts) is tuple:
            for index, part in enumerate(self.parts):
                check_size(f"Param {self.name!r} parts[{index}]", part, at_most=None)
        if type(self.parts) is not tuple or not self.parts or sum(self.parts) != length:
            raise TopologyError(
                f"Param {self.name!r} parts {show(self.parts)} must be ints >= 1 summing to dim "
                f"{self.cut_dim} of shape {self.shape} ({length}); give each fused part's size"
            )

    def _check_expert(self) -> None:
        is_expert = self.row.grid == "expert"
        given = (self.expert is not None, self.num_experts is not None)
        if given != (is_expert, is_expert):
            raise TopologyError(
                f"Param {self.name!r} with sharding {self.sharding!r} takes expert and "
                f"num_experts {'both' if is_expert else 'neither'}, got expert={self.expert}, "
                f"num_experts={self.num_experts}; "
                + ("give both" if is_expert else "use an expert-* sharding for an expert")
            )
        if is_expert and (
            self.layer is None or self.num_experts is None or not self.expert < self.num_experts  # type: ignore[operator]
        ):
            raise TopologyError(
                f"Param {self.name!r} expert {self.expert} must lie in range(num_experts="
                f"{self.num_experts}) of a layer (layer={self.layer}); give both and a layer"
            )

    @property
    def row(self) -> Sharding:
        """This weight's row of :data:`SHARDINGS`."""
        return SHARDINGS[self.sharding]

    @property
    def cut_dim(self) -> int:
        """The dim the tensor-parallel axis cuts; 0 (one shard) for a whole weight.

        Raises:
            TopologyError: the sharding cuts a dim the shape lacks.
        """
        dim = self.row.dim
        if dim is None:
            return 0
        if dim >= len(self.shape):
            raise TopologyError(
                f"Param {self.name!r} sharding {self.sharding!r} cuts dim {dim} but shape "
                f"{self.shape} has {len(self.shape)} dims; give a {dim + 1}-dim shape"
            )
        return dim

    @property
    def part_sizes(self) -> tuple[int, ...]:
        """``parts``, or the whole cut dim as one part."""
        return self.parts if self.parts is not None else (self.shape[self.cut_dim],)

    @property
    def row_bytes(self) -> int:
        """Bytes of one index of the cut dim (the product of the other dims, times itemsize)."""
        size, cut = self.itemsize, self.cut_dim
        for dim, n in enumerate(self.shape):
            if dim != cut:
                size *= n
        return size

    @property
    def nbytes(self) -> int:
        """Bytes of the whole, unsharded weight."""
        return self.row_bytes * self.shape[self.cut_dim]


def sibling(first: Record, **changes: Any) -> Record:
    """``first`` (an attrs record, checked when made) with ``changes``, made without running its
    checks again: for the many records a listing makes that differ from a checked one only in
    values valid by construction (a weight's name and expert; DeepSeek-V3 lists 29,696 expert
    weights, and a checked one costs several times as much).

    >>> first = Param("experts.0.fc2", (8, 4), sharding="expert-row", layer=1, expert=0,
    ...               num_experts=4)
    >>> sibling(first, name="experts.3.fc2", expert=3) == attrs.evolve(
    ...     first, name="experts.3.fc2", expert=3)
    True
    """
    kind = type(first)
    fields = _FIELDS.get(kind)
    if fields is None:
        names = tuple(field.name for field in attrs.fields(kind))  # type: ignore[arg-type]
        fields = _FIELDS[kind] = (names, operator.attrgetter(*names, *names[:1]))  # a tuple
    found = object.__new__(kind)
    put = object.__setattr__
    for name, value in zip(fields[0], fields[1](first), strict=False):  # the first twice
        put(found, name, value)
    for name, value in changes.items():
        put(found, name, value)
    return found


_FIELDS: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}
"""The field names of each record type :func:`sibling` copied, and a getter of their values."""
