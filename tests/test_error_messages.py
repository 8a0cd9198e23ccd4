"""Error messages people act on, pinned whole: group indexes, slices, the world limit, AxisGroups.

Each expected text is worked out by hand from the inputs: ``Topology(8, tp=2)`` has 4 tp groups
(indexes -4 to 3); 2**41 ranks is one doubling past the 2**40 limit.
"""

from __future__ import annotations

import pytest

from topology import AxisGroups, Grid, Topology, TopologyError


def test_a_group_index_out_of_range_names_the_valid_ones() -> None:
    """Indexing and ``ranks`` of a group list say which indexes exist."""
    groups = Topology(8, tp=2).groups("tp")
    expected = "group index 99 is out of range for 4 groups; valid: -4 to 3"
    for ask in (lambda: groups[99], lambda: groups.ranks(99)):
        with pytest.raises(TopologyError) as caught:
            ask()
        assert str(caught.value) == expected


def test_a_zero_slice_step_is_refused() -> None:
    """``groups[::0]`` says what is wrong, as ``list`` does for a zero step."""
    with pytest.raises(TopologyError) as caught:
        Topology(8, tp=2).groups("tp")[::0]
    assert str(caught.value) == "slice step cannot be zero"


def test_a_world_past_the_limit_says_the_limit() -> None:
    """2**41 ranks: the message names the size, the limit and what to do."""
    with pytest.raises(TopologyError) as caught:
        Topology(2**41)
    assert str(caught.value) == (
        "world_size 2199023255552 is larger than 1099511627776 (2**40), the most ranks "
        "rank-topology lays out; use a smaller world"
    )


def test_an_unknown_axis_groups_kind_lists_the_offered_ones() -> None:
    """The message lists the kinds on offer and how to offer others."""
    layout = AxisGroups(Grid.from_sizes(pipe=2, data=2), kinds=("data",))
    with pytest.raises(TopologyError) as caught:
        layout.size("pipe")
    assert str(caught.value) == (
        "unknown kind 'pipe'; this layout offers data (pass kinds=... to AxisGroups for other "
        "sets of axes)"
    )
