"""Hostile hostfiles: bounded work and clean errors (issue 22, item 2).

Bounds are checked with ``MAX_HOSTS`` patched small (the count is refused before the names are
listed); numbers of thousands of digits must be a TopologyError, not Python's int() limit.
"""

from __future__ import annotations

import sys
from unittest import mock

import pytest

from topology import TopologyError
from topology._machine import hostlist
from topology._machine.readers.hostfile import parse_hostfile

HUGE = "9" * 5000


def test_the_host_lists_of_one_file_share_one_bound() -> None:
    """Lines of 3 hosts each: the third line passes a bound of 8 for the whole file."""
    text = "a[1-3] slots=1\nb[1-3] slots=1\nc[1-3] slots=1\n"
    with (
        mock.patch.object(hostlist, "MAX_HOSTS", 8),
        pytest.raises(
            TopologyError,
            match=r"hostfile names more than 8 hosts in all its host lists \(6 before",
        ),
    ):
        parse_hostfile(text)


def test_twenty_six_full_lists_are_refused_at_the_second() -> None:
    """26 lines of 2**20 hosts would be 27 million; with the bound at 4, refused at line 2."""
    text = "".join(f"n{i}x[1-4] slots=8\n" for i in range(26))
    with (
        mock.patch.object(hostlist, "MAX_HOSTS", 4),
        mock.patch.object(hostlist, "_expand_entry", wraps=hostlist._expand_entry) as entry,
        pytest.raises(TopologyError, match="names more than 4 hosts"),
    ):
        parse_hostfile(text)
    assert entry.call_count == 2


@pytest.mark.parametrize("value", [HUGE, "0" * 5000 + "8", "1" + "0" * 4400])
def test_slots_of_thousands_of_digits_are_refused(value: str) -> None:
    """slots= of any length: a range error (leading zeros of a small value included)."""
    text = f"node1 slots={value}\n"
    if value.lstrip("0") == "8":
        assert parse_hostfile(text).hosts[0].gpus == 8
        return
    with pytest.raises(
        TopologyError,
        match=r"slots must be at most 65536 \(2\*\*16\), more GPUs than any host has, got <int of",
    ):
        parse_hostfile(text)


def test_a_bracket_number_of_thousands_of_digits_is_refused() -> None:
    """A host list number past MAX_DIGITS on a line is a TopologyError."""
    with pytest.raises(TopologyError, match=r"a number of 5000 digits"):
        parse_hostfile(f"n[{HUGE}] slots=4\n")


def test_host_names_with_huge_numbers_order_naturally() -> None:
    """Names holding 5,000-digit numbers sort under natural and Slurm order without int()."""
    alloc = parse_hostfile(f"n{HUGE} slots=1\nn7 slots=1\n")
    assert [h.name for h in alloc.ordered("natural").hosts] == ["n7", f"n{HUGE}"]
    assert [h.name for h in alloc.ordered("slurm").hosts] == ["n7", f"n{HUGE}"]


def test_many_hosts_read_in_linear_steps() -> None:
    """A file of 20,000 one-host lines reads with no quadratic step: each line expanded once."""
    text = "".join(f"n{i} slots=1\n" for i in range(20_000))
    with mock.patch.object(hostlist, "_expand_entry", wraps=hostlist._expand_entry) as entry:
        assert len(parse_hostfile(text).hosts) == 20_000
    assert entry.call_count == 20_000
    assert sys.getrecursionlimit() >= 100  # nothing here recursed past it
