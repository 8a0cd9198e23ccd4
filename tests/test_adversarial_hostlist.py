"""Hostile host lists: bounded work and clean errors (issue 22, item 2).

Every case is bounded without timing: totals are refused by counting before any name is listed
(checked with the bound patched small, or by a size that would need gigabytes if listed), numbers
of any length are refused or ordered without ``int()`` (which stops at 4,300 digits).
"""

from __future__ import annotations

from unittest import mock

import pytest

from topology import TopologyError, expand_hostlist
from topology._machine import hostlist
from topology._machine.hostlist import (
    MAX_DIGITS,
    MAX_HOSTS,
    HostCount,
    natural_key,
    slurm_key,
)

HUGE = "9" * 5000
"""A number past Python's 4,300-digit int() limit."""


def test_forty_full_ranges_in_one_bracket_are_refused_before_listing() -> None:
    """40 ranges of 2**20: refused at the second range (listing them would take gigabytes)."""
    bracket = ",".join(f"{i << 20}-{(i << 20) + (1 << 20) - 1}" for i in range(40))
    wrapped = mock.patch.object(hostlist, "_expand_entry", wraps=hostlist._expand_entry)
    refused = pytest.raises(TopologyError, match=rf"has more than {MAX_HOSTS} hosts")
    with wrapped as entry, refused:
        expand_hostlist(f"n[{bracket}]")
    assert entry.call_count == 1


def test_a_product_of_brackets_is_refused_before_listing() -> None:
    """a[1-1024]b[1-1024]c[1-1024]: 2**30 names, refused at the third bracket."""
    with pytest.raises(TopologyError, match=rf"has more than {MAX_HOSTS} hosts"):
        expand_hostlist("a[1-1024]b[1-1024]c[1-1024]")


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("n[1-4],m[1-4]", True),
        ("n[1-4],m[1-4],x", False),
        ("n[1-3]m[1-3]", False),
        ("n[1-9]", False),
    ],
)
def test_the_bound_holds_exactly(text: str, ok: bool) -> None:
    """With the bound at 8 hosts: 8 pass, 9 are refused, whatever the shape of the list."""
    with mock.patch.object(hostlist, "MAX_HOSTS", 8):
        if ok:
            assert len(expand_hostlist(text)) == 8
        else:
            with pytest.raises(TopologyError, match="has more than 8 hosts"):
                expand_hostlist(text)


def test_the_lists_of_one_input_share_one_bound() -> None:
    """Two lists of 5 hosts of one input exceed a bound of 8 in all; the error names the input."""
    with mock.patch.object(hostlist, "MAX_HOSTS", 8):
        count = HostCount("hostfile 'h'")
        assert len(count.expand("n[1-5]")) == 5
        with pytest.raises(
            TopologyError,
            match=r"hostfile 'h' names more than 8 hosts in all its host lists "
            r"\(5 before 'm\[1-5\]'\)",
        ):
            count.expand("m[1-5]")


@pytest.mark.parametrize("text", [f"n[{HUGE}]", f"n[1-{HUGE}]", f"n[{HUGE}-1]"])
def test_a_number_of_thousands_of_digits_is_refused(text: str) -> None:
    """A bracket number longer than MAX_DIGITS is a TopologyError naming the limit."""
    with pytest.raises(
        TopologyError,
        match=rf"a number of 5000 digits; numbers in brackets have at most {MAX_DIGITS}",
    ):
        expand_hostlist(text)


def test_the_longest_number_allowed_expands() -> None:
    """MAX_DIGITS digits (zero padded) still expand."""
    width = "0" * (MAX_DIGITS - 1)
    assert expand_hostlist(f"n[{width}1-{width}2]") == (f"n{width}1", f"n{width}2")


def test_host_names_with_huge_numbers_sort_by_value() -> None:
    """Natural and Slurm order compare numbers of any length by value, without int()."""
    names = [f"n{HUGE}", "n1" + "0" * 5000, "n7", f"n0{HUGE}"]
    # equal values: natural order tells them apart by the digits as written, Slurm's by width
    natural = ["n7", f"n0{HUGE}", f"n{HUGE}", "n1" + "0" * 5000]
    assert sorted(names, key=natural_key) == natural
    assert sorted(names, key=slurm_key) == ["n7", f"n{HUGE}", f"n0{HUGE}", "n1" + "0" * 5000]
