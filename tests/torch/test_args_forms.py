"""The adapter's int checks say exactly what the core's say: one message form for each rule.

``topology_torch._args`` re-writes ``topology._args.check_size``/``check_index`` because the
adapter may not import a private core module; these tests pin the two to the same message (and
the same accepted values) for the same inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from topology import TopologyError
from topology import _args as core
from topology_torch import _args as adapter

VALUES: list[object] = [-(2**70), -1, 0, 1, 2, 7, 2**16, 2**40, True, False, 2.0, "3", None, [1]]
"""Valid and invalid values of every kind a caller passes (bools, floats, strings, None)."""

BOUNDS: list[dict[str, Any]] = [
    {"at_most": None},
    {"at_most": 8, "why": "the GPUs of one host"},
    {"at_most": 2**16, "why": "more GPUs than any host has"},
    {"at_most": 2**40},
    {"at_most": 2**40, "why": "all the ranks"},
    {"at_most": 1},
]
"""Bounds as the callers give them: none, small, a large power of two, with and without why."""


def _outcome(check: Callable[..., int], value: object, bound: dict[str, Any]) -> object:
    try:
        return check("x", value, **bound)
    except TopologyError as error:
        return f"{type(error).__name__}: {error}"


@pytest.mark.parametrize("bound", BOUNDS, ids=str)
@pytest.mark.parametrize("value", VALUES, ids=repr)
@pytest.mark.parametrize("name", ["check_size", "check_index"])
def test_the_adapter_checks_say_what_the_core_checks_say(
    name: str, value: object, bound: dict[str, Any]
) -> None:
    """The same value and bound give the same result or the same error message in both."""
    expected = _outcome(getattr(core, name), value, bound)
    assert _outcome(getattr(adapter, name), value, bound) == expected


def test_the_forms_are_the_documented_ones() -> None:
    """The three forms, spelled out once (what every caller's message looks like)."""
    assert _outcome(adapter.check_size, 0, {}) == (
        "TopologyError: x must be a positive int, got 0 (int)"
    )
    assert _outcome(adapter.check_index, True, {}) == (
        "TopologyError: x must be a non-negative int, got True (bool)"
    )
    assert _outcome(adapter.check_size, 9, {"at_most": 8, "why": "the GPUs of one host"}) == (
        "TopologyError: x must be at most 8, the GPUs of one host, got 9"
    )


def test_only_the_default_bound_differs() -> None:
    """The core bounds a size by 2**40 by default; the adapter's default is no bound."""
    assert adapter.check_size("x", 2**40 + 1) == 2**40 + 1
    with pytest.raises(TopologyError, match=r"^x must be at most 1099511627776 \(2\*\*40\), the"):
        core.check_size("x", 2**40 + 1)
