"""Argument checks of the cost model: finite numbers, bounded counts, typed values (private).

Every number the model computes with is a finite float or an int of at most 2**53, so no
arithmetic on valid input can raise or turn into ``inf`` or ``nan`` unnoticed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import attrs

from .._args import as_float, check_index, check_size, show
from .._errors import TopologyError

__all__ = [
    "MAX_COUNT",
    "amount",
    "as_float",
    "check_amount",
    "check_count",
    "check_flag",
    "check_instance",
    "count",
    "flag",
    "instance_of",
    "optional",
    "positive",
    "size",
    "text",
]

MAX_COUNT = 2**53
"""The largest count (layers, batch, hidden size...): every int up to it is exact as a float."""

T = TypeVar("T")

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def check_amount(name: str, value: object, *, strict: bool = False) -> float:
    """``value`` as a float if it is a finite number >= 0 (> 0 if ``strict``), else raise.

    >>> check_amount("size", 2)
    2.0
    >>> check_amount("size", float("nan"))
    Traceback (most recent call last):
    topology._errors.TopologyError: size must be a finite number >= 0, got nan
    """
    number = as_float(value)
    valid = isinstance(number, float) and math.isfinite(number)
    if not valid or not (number > 0 if strict else number >= 0):
        bound = "> 0" if strict else ">= 0"
        raise TopologyError(f"{name} must be a finite number {bound}, got {show(value)}")
    return float(number)


def check_count(name: str, value: object, minimum: Literal[0, 1] = 1) -> int:
    """``value`` if it is a positive (``minimum=0``: non-negative) int up to 2**53, else raise.

    >>> check_count("layers", 0)
    Traceback (most recent call last):
    topology._errors.TopologyError: layers must be a positive int, got 0 (int)
    """
    rule = check_index if minimum == 0 else check_size
    return rule(name, value, at_most=MAX_COUNT, why="the most a float counts exactly")


def check_flag(name: str, value: object) -> bool:
    """``value`` if it is True or False, else raise."""
    if type(value) is not bool:
        raise TopologyError(f"{name} must be True or False, got {show(value)}")
    return value


def check_instance(name: str, value: object, kind: type[T] | tuple[type[T], ...], hint: str) -> T:
    """``value`` if it is an instance of ``kind``, else raise; ``hint`` says what to pass."""
    if not isinstance(value, kind):
        raise TopologyError(f"{name} must be {hint}, got {show(value)} ({type(value).__name__})")
    return value


def amount(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """attrs validator: a finite number >= 0 (use with ``converter=as_float``)."""
    check_amount(attribute.name, value)


def positive(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """attrs validator: a finite number > 0 (use with ``converter=as_float``)."""
    check_amount(attribute.name, value, strict=True)


def size(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """attrs validator: an int from 1 to 2**53."""
    check_count(attribute.name, value, 1)


def count(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """attrs validator: an int from 0 to 2**53."""
    check_count(attribute.name, value, 0)


def text(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """attrs validator: a non-empty string."""
    if not isinstance(value, str) or not value:
        raise TopologyError(f"{attribute.name} must be a non-empty string, got {show(value)}")


def flag(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """attrs validator: True or False."""
    check_flag(attribute.name, value)


def instance_of(kind: type[Any] | tuple[type[Any], ...], hint: str) -> Validator:
    """attrs validator: an instance of ``kind``; ``hint`` says what to pass."""

    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        check_instance(attribute.name, value, kind, hint)

    return check


def optional(validator: Validator) -> Validator:
    """attrs validator: None, or what ``validator`` accepts."""

    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is not None:
            validator(instance, attribute, value)

    return check
