"""Edges of the argument helpers (the short repr for messages, Pollard's rho) that mutation
testing found untested.

The repr limits are the ones ``show``'s docstring documents (eight items of a list, a long
string cut); factors are checked by division, never against the code's own output.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from topology._args import _ShortRepr, _some_factor, show

ODD_PRIMES = [3, 5, 7, 11, 13, 101, 1009, 65537, 1000003]


class _Text:
    """An object whose repr is a given text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def test_short_repr_lists_eight_items() -> None:
    """A fresh short repr shows eight items of a long list, as show's docstring documents."""
    assert _ShortRepr().repr(list(range(100))) == "[0, 1, 2, 3, 4, 5, 6, 7, ...]"
    assert _ShortRepr().repr(tuple(range(9))) == "(0, 1, 2, 3, 4, 5, 6, 7, ...)"


def test_short_repr_cuts_strings_to_sixty_characters() -> None:
    """A long string is cut to at most 60 characters, keeping both ends."""
    text = _ShortRepr().repr("a" + "x" * 98 + "z")
    assert 10 < len(text) <= 60
    assert text.startswith("'ax") and text.endswith("xz'") and "..." in text


def test_short_repr_keeps_a_60_character_object_whole() -> None:
    """An object's repr of 60 characters is kept; one of 61 is cut to at most 60."""
    assert _ShortRepr().repr(_Text("y" * 60)) == "y" * 60
    cut = _ShortRepr().repr(_Text("a" + "y" * 59 + "b"))
    assert len(cut) <= 60 and cut.startswith("ay") and cut.endswith("yb") and "..." in cut


def test_short_repr_abbreviates_past_three_levels() -> None:
    """Containers nested four deep show their innermost level as an ellipsis."""
    # level 3 at the outer list, 2 and 1 inside, 0 (abbreviated) at the fourth list
    assert _ShortRepr().repr([[[[0]]]]) == "[[[[...]]]]"
    assert _ShortRepr().repr([[[0]]]) == "[[[0]]]"


def test_show_replaces_a_failing_repr_by_the_type_name() -> None:
    """A value whose abbreviated repr fails shows as its type name."""
    # reprlib picks repr_tuple by the type's name; this "tuple" has no len(), so it fails
    fake = type("tuple", (), {})()
    assert show(fake) == "<tuple object>"


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(ODD_PRIMES), st.sampled_from(ODD_PRIMES))
def test_some_factor_divides_a_product_of_odd_primes(p: int, q: int) -> None:
    """Pollard's rho returns a non-trivial divisor of an odd composite."""
    n = p * q
    factor = _some_factor(n)
    assert 1 < factor < n
    assert n % factor == 0
