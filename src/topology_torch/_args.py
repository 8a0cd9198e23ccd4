"""The adapter's positive- and non-negative-int checks, in the core's message forms (private).

The adapter may not import the core's private ``topology._args``, so this module writes the
same two rules with exactly the same messages (``tests/test_args_forms.py`` pins them equal):

- ``{name} must be a positive int, got {value} ({type})`` (a bool is not an int here);
- ``{name} must be a non-negative int, got {value} ({type})``;
- with ``at_most``: ``{name} must be at most {at_most}, {why}, got {value}``.

One difference, on purpose: the core bounds a size by 2**40 (the most ranks it lays out) unless
told otherwise; here no bound applies unless ``at_most`` is given, since the adapter's sizes are
tensor dims, minutes, layer counts and generations as much as ranks. A rule on top
(divisibility, a range tied to another argument) follows the call.

>>> check_size("lora_rank", 0)
Traceback (most recent call last):
topology._errors.TopologyError: lora_rank must be a positive int, got 0 (int)
"""

from __future__ import annotations

from topology import TopologyError

from ._debug_checks import show

__all__ = ["check_index", "check_size"]


_MAX_WORLD_SIZE = 2**40
_MOST_RANKS = "the most ranks rank-topology lays out"
"""The core's bound on a layout's ranks and its reason (the message's reason when none is
given for a bound of 2**40, as in the core)."""


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
        why = why or (_MOST_RANKS if at_most == _MAX_WORLD_SIZE else "")
        reason = f", {why}" if why else ""
        raise TopologyError(f"{name} must be at most {_number(at_most)}{reason}, got {show(value)}")
    return value


def check_size(name: str, value: object, *, at_most: int | None = None, why: str = "") -> int:
    """Return ``value`` if it is a positive int (not a bool) up to ``at_most``, else raise.

    Raises:
        TopologyError: ``{name} must be a positive int, got {value} ({type})``, or the bound's
            ``{name} must be at most {at_most}, {why}, got {value}``.
    """
    return _check_int(name, value, 1, "a positive int", at_most, why)


def check_index(name: str, value: object, *, at_most: int | None = None, why: str = "") -> int:
    """Return ``value`` if it is a non-negative int (not a bool) up to ``at_most``, else raise.

    Raises:
        TopologyError: ``{name} must be a non-negative int, got {value} ({type})``, or the
            bound's message as in :func:`check_size`.
    """
    return _check_int(name, value, 0, "a non-negative int", at_most, why)
