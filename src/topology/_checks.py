"""Small argument checks shared by the core's constructors (private)."""

from __future__ import annotations

from collections.abc import Iterable

from ._errors import TopologyError

__all__ = ["MAX_WORLD_SIZE", "check_rank_offset", "check_size", "divisors", "format_choices"]

MAX_WORLD_SIZE = 2**40
"""Keeps every group count below ``sys.maxsize`` and error-message arithmetic instant."""


def check_size(name: str, value: object) -> int:
    """Return ``value`` if it is a positive int (a bool is not a size), else raise.

    >>> check_size("tp", 4)
    4
    >>> check_size("tp", True)
    Traceback (most recent call last):
    topology._errors.TopologyError: tp must be a positive int, got True (bool)
    """
    if type(value) is not int or value < 1:
        raise TopologyError(
            f"{name} must be a positive int, got {value!r} ({type(value).__name__})"
        )
    return value


def check_rank_offset(value: object) -> int:
    """Return ``value`` if it is a non-negative int, else raise."""
    if type(value) is not int or value < 0:
        raise TopologyError(
            f"rank_offset must be a non-negative int, got {value!r} ({type(value).__name__})"
        )
    return value


def divisors(n: int) -> list[int]:
    """All positive divisors of ``n``, ascending.

    >>> divisors(12)
    [1, 2, 3, 4, 6, 12]
    """
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    large = [n // d for d in reversed(small) if d * d != n]
    return small + large


def format_choices(values: Iterable[object], limit: int = 12) -> str:
    """``1, 2, 4, 8`` with an ellipsis past ``limit`` items."""
    items = [str(v) for v in values]
    if len(items) > limit:
        items = [*items[: limit - 1], "...", items[-1]]
    return ", ".join(items)
