"""Small argument checks shared by the core's constructors (private)."""

from __future__ import annotations

import builtins
import reprlib
from collections.abc import Iterable
from math import gcd, isqrt
from typing import Any

from ._errors import TopologyError

__all__ = [
    "MAX_WORLD_SIZE",
    "as_float",
    "check_index",
    "check_size",
    "divisors",
    "format_choices",
    "prime_factors",
    "show",
]

MAX_WORLD_SIZE = 2**40
"""Keeps every group count below ``sys.maxsize`` and error-message arithmetic instant."""


class _ShortRepr(reprlib.Repr):
    """``reprlib`` with room for real values, and huge ints summarised instead of converted."""

    def __init__(self) -> None:
        super().__init__()
        self.maxstring = 60
        self.maxother = 60
        self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = self.maxdict = 8
        self.maxlevel = 3

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 192:
            digits = int(x.bit_length() * 0.30103) + 1
            return f"<{type(x).__name__} of about {digits} digits>"
        return builtins.repr(x)

    def repr_instance(self, x: object, level: int) -> str:
        try:
            text = builtins.repr(x)
        except Exception:
            return f"<{type(x).__name__} object>"
        if len(text) > self.maxother:
            keep = (self.maxother - 3) // 2
            text = text[:keep] + "..." + text[len(text) - keep :]
        return text


_SHORT = _ShortRepr()


def show(value: object) -> str:
    """A short, never-failing repr of a user's value, for error messages.

    Huge ints (whose ``repr`` Python refuses past 4,300 digits), long strings and big or
    deeply nested containers are abbreviated; a ``__repr__`` that raises is replaced.

    >>> show(10**5000), show("x" * 100)[-8:], show(list(range(100)))
    ('<int of about 5001 digits>', "xxxxxxx'", '[0, 1, 2, 3, 4, 5, 6, 7, ...]')
    """
    try:
        return _SHORT.repr(value)
    except Exception:
        return f"<{type(value).__name__} object>"


def as_float(value: Any) -> Any:
    """An int as a float when it fits one; anything else unchanged, for the validator to judge
    (an int past a float, ``10**400``, stays an int and is no finite float).

    >>> as_float(3), as_float(10**400) == 10**400, as_float("3"), as_float(True)
    (3.0, True, '3', True)
    """
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            return value
    return value


_MOST_RANKS = "the most ranks rank-topology lays out"
"""Why :data:`MAX_WORLD_SIZE` bounds a value (the message's reason when none is given)."""


def _number(value: int) -> str:
    """``value``, with its power of two when it is a large one: ``1099511627776 (2**40)``."""
    power = value.bit_length() - 1
    return f"{value} (2**{power})" if value >= 2**16 and value == 1 << power else str(value)


def _check_int(
    name: str, value: object, minimum: int, rule: str, at_most: int | None, why: str
) -> int:
    if type(value) is not int or value < minimum:
        raise TopologyError(f"{name} must be {rule}, got {show(value)} ({type(value).__name__})")
    if at_most is not None and value > at_most:
        why = why or (_MOST_RANKS if at_most == MAX_WORLD_SIZE else "")
        reason = f", {why}" if why else ""
        raise TopologyError(f"{name} must be at most {_number(at_most)}{reason}, got {show(value)}")
    return value


def check_size(
    name: str, value: object, *, at_most: int | None = MAX_WORLD_SIZE, why: str = ""
) -> int:
    """Return ``value`` if it is a positive int (a bool is not one) up to ``at_most``, else raise.

    The one positive-int rule of the core, with one message for each half: ``{name} must be a
    positive int, got {value} ({type})`` and ``{name} must be at most {at_most}, {why}, got
    {value}`` (``why`` says what the bound is; for 2**40 it is the most ranks a layout holds).
    The bound defaults to 2**40; ``at_most=None`` drops it. A rule on top (divisibility, a range
    tied to another argument) follows the call. ``topology_torch._args`` has a twin with the
    same messages.

    >>> check_size("tp", 4)
    4
    >>> check_size("tp", True)
    Traceback (most recent call last):
    topology._errors.TopologyError: tp must be a positive int, got True (bool)
    >>> check_size("gpus", 9, at_most=8, why="the GPUs of one host")
    Traceback (most recent call last):
    topology._errors.TopologyError: gpus must be at most 8, the GPUs of one host, got 9
    """
    return _check_int(name, value, 1, "a positive int", at_most, why)


def check_index(
    name: str, value: object, *, at_most: int | None = MAX_WORLD_SIZE, why: str = ""
) -> int:
    """Return ``value`` if it is a non-negative int up to ``at_most``, else raise.

    The non-negative twin of :func:`check_size` (ranks, offsets, counts that may be zero), with
    the same message forms: ``{name} must be a non-negative int, got {value} ({type})``.

    >>> check_index("rank_offset", -1)
    Traceback (most recent call last):
    topology._errors.TopologyError: rank_offset must be a non-negative int, got -1 (int)
    """
    return _check_int(name, value, 0, "a non-negative int", at_most, why)


_WITNESSES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
"""Miller-Rabin with these bases is exact below 3.3 * 10**24 (Sorenson and Webster 2015)."""


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    for p in _WITNESSES:
        if n % p == 0:
            return n == p
    odd, twos = n - 1, 0
    while odd % 2 == 0:
        odd, twos = odd // 2, twos + 1
    for base in _WITNESSES:
        x = pow(base, odd, n)
        if x in (1, n - 1):
            continue
        for _ in range(twos - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _some_factor(n: int) -> int:
    """A non-trivial factor of the odd composite ``n`` (Pollard's rho, Floyd's cycle finding)."""
    for c in range(1, n):
        x = y = 2
        found = 1
        while found == 1:
            x = (x * x + c) % n
            y = (y * y + c) % n
            y = (y * y + c) % n
            found = gcd(x - y, n)
        if found != n:
            return found
    raise AssertionError(f"no factor of {n} found")  # pragma: no cover - n is composite


def prime_factors(n: int) -> dict[int, int]:
    """``{prime: exponent}`` of ``n >= 1``.

    Algorithm: trial division by primes below 1,000, then Miller-Rabin and Pollard's rho on what
    is left, so the cost is about the fourth root of ``n``'s second-largest prime factor (a few
    thousand steps for any ``n`` below 2**64), never linear or square-root in ``n``.

    >>> prime_factors(2**40), prime_factors(720)
    ({2: 40}, {2: 4, 3: 2, 5: 1})
    """
    factors: dict[int, int] = {}
    for p in range(2, 1000):
        if p * p > n:
            break
        while n % p == 0:
            factors[p] = factors.get(p, 0) + 1
            n //= p
    pending = [n] if n > 1 else []
    while pending:
        m = pending.pop()
        if _is_prime(m):
            factors[m] = factors.get(m, 0) + 1
            continue
        root = isqrt(m)
        if root * root == m:
            pending += [root, root]
            continue
        part = _some_factor(m)
        pending += [part, m // part]
    return dict(sorted(factors.items()))


def divisors(n: int) -> list[int]:
    """All positive divisors of ``n``, ascending, built from its prime factors.

    The cost grows with the number of divisors (at most 6,720 below 2**40), not with ``n``.

    >>> divisors(12)
    [1, 2, 3, 4, 6, 12]
    >>> len(divisors(2**40)), divisors(2**40 - 87)
    (41, [1, 1099511627689])
    """
    result = [1]
    for prime, exponent in prime_factors(n).items():
        result = [d * prime**k for d in result for k in range(exponent + 1)]
    return sorted(result)


def format_choices(values: Iterable[object], limit: int = 12) -> str:
    """``1, 2, 4, 8`` with an ellipsis past ``limit`` items."""
    items = [str(v) for v in values]
    if len(items) > limit:
        items = [*items[: limit - 1], "...", items[-1]]
    return ", ".join(items)
