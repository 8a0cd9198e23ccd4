"""attrs validators for the core's records that raise ``TopologyError`` (private).

The records a query returns (``Pipeline``, ``RankInfo``, ``Placement``, ``Finding``, ``Report``)
can also be built by hand; their fields are checked with these, so a wrong type is a
``TopologyError`` naming the record, the field and the value, never a ``TypeError`` later.

>>> import attrs
>>> @attrs.frozen
... class Point:
...     x: int = attrs.field(validator=whole(0))
>>> Point(-1)
Traceback (most recent call last):
topology._errors.TopologyError: Point.x must be a non-negative int, got -1 (int)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from ._args import check_index, check_size, show
from ._errors import TopologyError

__all__ = ["LIMIT", "LIMIT_WHY", "flag", "instance", "pairs", "text", "tuple_of", "whole"]

Validator = Callable[[Any, Any, Any], None]


def _fail(instance: object, attribute: Any, rule: str, value: object) -> TopologyError:
    return TopologyError(
        f"{type(instance).__name__}.{attribute.name} must be {rule}, "
        f"got {show(value)} ({type(value).__name__})"
    )


LIMIT = 2**64
"""No rank, coordinate or count (Megatron's ``new_group`` calls included) of a layout of at most
2**40 ranks comes near this; it keeps every value printable."""

LIMIT_WHY = "far beyond any rank, coordinate or count"
"""Why :data:`LIMIT` bounds a value, for the error message."""


def whole(minimum: Literal[0, 1]) -> Validator:
    """A non-negative (``whole(0)``) or positive (``whole(1)``) int up to :data:`LIMIT`."""
    rule = check_index if minimum == 0 else check_size

    def check(instance: object, attribute: Any, value: object) -> None:
        name = f"{type(instance).__name__}.{attribute.name}"
        rule(name, value, at_most=LIMIT, why=LIMIT_WHY)

    return check


def flag(instance: object, attribute: Any, value: Any) -> None:
    """A bool."""
    if type(value) is not bool:
        raise _fail(instance, attribute, "True or False", value)


def text(instance: object, attribute: Any, value: Any) -> None:
    """A string."""
    if not isinstance(value, str):
        raise _fail(instance, attribute, "a string", value)


def instance(*types: type) -> Validator:
    """An instance of one of ``types``."""
    names = " or ".join(t.__name__ for t in types)

    def check(owner: object, attribute: Any, value: object) -> None:
        if not isinstance(value, types):
            raise _fail(owner, attribute, f"a {names}", value)

    return check


def tuple_of(*types: type) -> Validator:
    """A tuple whose items are instances of ``types``."""
    names = " or ".join(t.__name__ for t in types)

    def check(owner: object, attribute: Any, value: object) -> None:
        if not isinstance(value, tuple) or not all(isinstance(v, types) for v in value):
            raise _fail(owner, attribute, f"a tuple of {names}", value)

    return check


def pairs(*second: type | None) -> Validator:
    """A tuple of ``(name, value)`` pairs: a string and an instance of ``second`` (None allowed)."""
    allowed = tuple(type(None) if t is None else t for t in second)
    names = " or ".join("None" if t is None else t.__name__ for t in second)

    def check(owner: object, attribute: Any, value: object) -> None:
        if not isinstance(value, tuple) or not all(
            isinstance(item, tuple)
            and len(item) == 2
            and isinstance(item[0], str)
            and isinstance(item[1], allowed)
            and type(item[1]) is not bool
            and (type(item[1]) is not int or abs(item[1]) <= LIMIT)
            for item in value
        ):
            raise _fail(owner, attribute, f"a tuple of (name, {names}) pairs", value)

    return check
