"""Slurm host lists: compress/expand round trips, sort keys, golden examples, and every error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology import TopologyError
from topology._machine.hostlist import (
    MAX_HOSTS,
    compress_hostlist,
    expand_hostlist,
    natural_key,
    slurm_key,
)

# Any characters but the host-list syntax ("[", "]", ",") and blanks, digits included.
name_chars = st.characters(
    blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc"), blacklist_characters="[],"
)
names = st.text(name_chars, min_size=1, max_size=12)
prefixes = st.text(st.sampled_from("ab-_.x"), max_size=4)


@st.composite
def numbered_hosts(draw: st.DrawFn) -> list[str]:
    """Hosts sharing a prefix and suffix, with arbitrary numbers and zero padding."""
    prefix, suffix = draw(prefixes), draw(st.text(st.sampled_from("-ib"), max_size=3))
    numbers = draw(st.lists(st.integers(0, 200), max_size=30))
    widths = draw(st.lists(st.integers(1, 4), min_size=len(numbers), max_size=len(numbers)))
    return [f"{prefix}{n:0{w}d}{suffix}" for n, w in zip(numbers, widths, strict=True)]


# ---- laws ----


@given(st.lists(names, max_size=20))
def test_expand_inverts_compress_on_arbitrary_names(hosts: list[str]) -> None:
    """Any list of names (repeats and order included) survives compress then expand."""
    assert expand_hostlist(compress_hostlist(hosts)) == tuple(hosts)


@given(numbered_hosts())
def test_expand_inverts_compress_on_number_sets(hosts: list[str]) -> None:
    """Hosts that differ only in a zero-padded number survive the round trip in order."""
    assert expand_hostlist(compress_hostlist(hosts)) == tuple(hosts)


@given(prefixes, st.sets(st.integers(0, 500), min_size=1, max_size=40))
def test_sorted_number_sets_compress_to_one_bracket(prefix: str, numbers: set[int]) -> None:
    """A sorted set of numbers under one prefix is one bracket group (or one plain name)."""
    hosts = [f"node{prefix}{n}" for n in sorted(numbers)]
    written = compress_hostlist(hosts)
    assert written.count("[") == (len(numbers) > 1)
    assert expand_hostlist(written) == tuple(hosts)


@given(st.lists(names, min_size=1, max_size=8), st.sampled_from([",", " ", "\n", ", "]))
def test_separators_are_commas_or_blanks(hosts: list[str], separator: str) -> None:
    """Plain names joined by commas or whitespace expand to themselves."""
    assert expand_hostlist(separator.join(hosts)) == tuple(hosts)


@given(names, names, names)
def test_natural_key_is_a_total_order(a: str, b: str, c: str) -> None:
    """natural_key: equal keys only for equal names, and the order is transitive."""
    assert (natural_key(a) == natural_key(b)) == (a == b)
    if natural_key(a) <= natural_key(b) <= natural_key(c):
        assert natural_key(a) <= natural_key(c)


@given(prefixes, st.integers(0, 10**6), st.integers(0, 10**6))
def test_natural_key_orders_numbers_as_numbers(prefix: str, m: int, n: int) -> None:
    """node<m> sorts before node<n> exactly when m < n."""
    assert (natural_key(f"n{prefix}{m}") < natural_key(f"n{prefix}{n}")) == (m < n)


@given(names, names)
def test_slurm_key_is_a_total_order(a: str, b: str) -> None:
    """slurm_key: equal keys only for equal names."""
    assert (slurm_key(a) == slurm_key(b)) == (a == b)


# ---- golden examples (written from topology.conf(5) and Slurm's hostlist syntax) ----

GOLDEN = [
    # Invariant: expand(text) == hosts, and compress(hosts) == text when `canonical`.
    (
        "tux[0-3,12,18-20]",
        ("tux0", "tux1", "tux2", "tux3", "tux12", "tux18", "tux19", "tux20"),
        True,
    ),
    ("s[0-2,4-5]", ("s0", "s1", "s2", "s4", "s5"), True),
    ("node[01-03,10]", ("node01", "node02", "node03", "node10"), True),
    ("node[08-10]", ("node08", "node09", "node10"), True),
    ("node[8-10]", ("node8", "node9", "node10"), True),
    ("node[098-101]", ("node098", "node099", "node100", "node101"), True),
    ("dev[0-1]-ib", ("dev0-ib", "dev1-ib"), True),
    ("a[1-2]b[3-4]", ("a1b3", "a1b4", "a2b3", "a2b4"), False),
    ("rack[1-2]-n[1-2]", ("rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"), False),
    ("node[3,1,2]", ("node3", "node1", "node2"), False),
    ("login,node[1-2]", ("login", "node1", "node2"), True),
    ("n1 n2\tn3", ("n1", "n2", "n3"), False),
    ("node7,node7", ("node7", "node7"), False),
    ("", (), True),
]


@pytest.mark.parametrize(("text", "hosts", "canonical"), GOLDEN)
def test_golden_host_lists(text: str, hosts: tuple[str, ...], canonical: bool) -> None:
    """Slurm's documented host-list forms expand to the hosts Slurm names."""
    assert expand_hostlist(text) == hosts
    if canonical:
        assert compress_hostlist(hosts) == text


def test_compress_keeps_the_order_given() -> None:
    """compress never sorts: node ranks follow the host order handed over."""
    assert compress_hostlist(["node66", "node7", "node70", "node8"]) == "node[66,7,70,8]"


def test_lexicographic_natural_and_slurm_orders_differ_as_documented() -> None:
    """torchrun's string sort scatters node7; natural and Slurm order put it first."""
    hosts = ["node66", "node7", "node70", "node8"]
    assert sorted(hosts) == ["node66", "node7", "node70", "node8"]
    assert sorted(hosts, key=natural_key) == ["node7", "node8", "node66", "node70"]
    assert sorted(hosts, key=slurm_key) == ["node7", "node8", "node66", "node70"]


def test_slurm_key_puts_names_without_a_number_first() -> None:
    """Slurm's hostlist_sort: prefixes compare first, a bare prefix before its numbered names."""
    assert sorted(["node2", "node", "node1-ib"], key=slurm_key) == ["node", "node2", "node1-ib"]


# ---- errors ----

ERRORS = [
    ("node[1-3", r"'\[' without '\]'"),
    ("node1-3]", r"'\]' without '\['"),
    ("node[[1-3]]", "nests brackets"),
    ("node[]", "a range is a number or lo-hi"),
    ("node[a-b]", "a range is a number or lo-hi"),
    ("node[1-]", "a range is a number or lo-hi"),
    ("node[-1]", "a range is a number or lo-hi"),
    ("node[1--2]", "a range is a number or lo-hi"),
    ("node[1,,2]", "a range is a number or lo-hi"),
    ("node[5-2]", "with 5 > 2; write 2-5"),
    ("node[0-99999999]", f"more than {MAX_HOSTS} hosts"),
    ("a[0-9999]b[0-9999]", f"more than {MAX_HOSTS} hosts"),
]


@pytest.mark.parametrize(("text", "message"), ERRORS)
def test_malformed_host_lists_raise(text: str, message: str) -> None:
    """Each malformed host list raises a TopologyError naming the list and the rule."""
    with pytest.raises(TopologyError, match=message):
        expand_hostlist(text)


def test_a_host_list_must_be_a_string() -> None:
    """A list where a host-list string belongs is an error, not an iteration over it."""
    with pytest.raises(TopologyError, match="must be a string"):
        expand_hostlist(["node1"])  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", "a,b", "n[1]", "has space"])
def test_names_that_cannot_be_written_raise(name: str) -> None:
    """compress refuses names the syntax cannot carry."""
    with pytest.raises(TopologyError, match="cannot be written in a host list"):
        compress_hostlist(["ok1", name])
