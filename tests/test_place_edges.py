"""place() at its edges: the lower bound on hand-counted allocations (racks that cannot hold
every group, hosts of unknown rack, kinds that add up, host sets it cannot bound); the weights
the swap search minimises, against a count over every group; the Arrangement's JSON form on a
placement whose crossings are counted by hand; and the step times place accepts.

``test_place.py`` checks that the bound never exceeds a brute-force optimum; these tests check
that it is not lower than it must be, with values worked out in each docstring.
"""

from __future__ import annotations

import math
from collections import Counter

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Allocation, Host, Tier, Topology, TopologyError, place
from topology._preflight.crossings import KIND_CLASSES
from topology._preflight.place.bound import key_bound, lower_bound
from topology._preflight.place.place import _Structure
from topology.strategies import topologies


def _racks(names: str, gpus: int = 4) -> Allocation:
    """One host per letter, in that rack (``?`` for unknown), listed in that order."""
    hosts = [Host(f"h{i}", gpus, (None if r == "?" else r,)) for i, r in enumerate(names)]
    return Allocation(hosts, [Tier("rack", nvlink=True)])


# -- the lower bound ------------------------------------------------------------------------------


def test_an_odd_rack_forces_one_tp_group_across() -> None:
    """tp8 on six 4-GPU hosts, racks of 3 and 3: three pairs of hosts, but a rack of 3 holds one
    whole pair (3 // 2), so 3 - 2 = 1 pair, 1 group, must cross."""
    assert lower_bound(Topology(24, tp=8), _racks("aaabbb"), "rack", ("tp",)) == 1


def test_kinds_with_equal_groups_each_add_their_crossings() -> None:
    """etp equals tp, so its one forced crossing adds to tp's: 1 + 1."""
    assert lower_bound(Topology(24, tp=8), _racks("aaabbb"), "rack", ("tp", "etp")) == 2


def test_racks_that_hold_every_pair_force_nothing() -> None:
    """tp8 on racks of 2 and 4 hosts: 1 + 2 = 3 whole pairs fit, all three groups stay inside."""
    assert lower_bound(Topology(24, tp=8), _racks("aabbbb"), "rack", ("tp",)) == 0


def test_hosts_of_unknown_rack_are_racks_of_one() -> None:
    """tp8 on four 4-GPU hosts of unknown rack: no rack holds a pair, both tp groups cross."""
    assert lower_bound(Topology(16, tp=8), _racks("????"), "rack", ("tp",)) == 2
    assert lower_bound(Topology(16, tp=8), _racks("a??a"), "rack", ("tp",)) == 1


def test_a_job_on_one_host_crosses_nothing() -> None:
    """tp8 on the 8 GPUs of a single host: no group spans two hosts."""
    alloc = Allocation([Host("solo", 8, ("r",))], [Tier("rack", nvlink=True)])
    assert lower_bound(Topology(8, tp=8), alloc, "rack", ("tp", "dp")) == 0


def test_a_kind_inside_hosts_does_not_hide_the_next_kind() -> None:
    """tp4 fills each 4-GPU host; the 4 dp groups {r, r+4, r+8, r+12} all run on hosts 0..3,
    which no rack of 2 holds: all 4 cross, whatever the order."""
    assert lower_bound(Topology(16, tp=4), _racks("aabb"), "rack", ("tp", "dp")) == 4


def test_each_rack_holds_whole_pairs_only() -> None:
    """tp4 on eight 2-GPU hosts: 4 tp groups on host pairs; racks of 3, 3 and 2 hosts hold
    1 + 1 + 1 = 3 whole pairs, so 1 group crosses. The tier may be given by index (0 = rack)."""
    alloc = _racks("aaabbbcc", gpus=2)
    assert lower_bound(Topology(16, tp=4), alloc, "rack", ("tp",)) == 1
    assert lower_bound(Topology(16, tp=4), alloc, 0, ("tp",)) == 1


def test_overlapping_host_sets_have_no_bound() -> None:
    """tp3 on 2-GPU hosts: groups (0, 1, 2) and (3, 4, 5) run on hosts {0, 1} and {1, 2}, which
    share host 1, so the counting argument does not apply."""
    assert lower_bound(Topology(6, tp=3), _racks("aab", gpus=2), "rack", ("tp",)) is None


def test_host_sets_of_two_sizes_have_no_bound() -> None:
    """pp5 varying fastest (order tp-pp-dp), position embeddings on stages 0, 1 and 3: the groups
    are ranks (0, 1, 3) and (5, 6, 8), on 2-GPU hosts {0, 1} and {2, 3, 4}: disjoint but of two
    sizes, so no bound."""
    topo = Topology(10, pp=5, order="tp-pp-dp", position_embedding_stages=(0, 1, 3))
    assert lower_bound(topo, _racks("aabbb", gpus=2), "rack", ("position-embedding",)) is None


def test_a_packing_lists_racks_and_their_hosts_in_natural_name_order() -> None:
    """tp8 on 4-GPU hosts listed a20 (r1), a10 (r2), a2 (r2), a1 (r1): the listed order pairs
    a20+a10 and a2+a1, lexicographic a1+a10 and a2+a20, natural a1+a2 and a10+a20, each across
    racks. Packing each rack's pair together (first fit over all hosts) wins: r1 before r2, and
    inside a rack natural name order, a1 before a20 and a2 before a10."""
    racks = {"a20": "r1", "a10": "r2", "a2": "r2", "a1": "r1"}
    alloc = Allocation([Host(n, 4, (r,)) for n, r in racks.items()], [Tier("rack", nvlink=True)])
    found = place(Topology(16, tp=8), alloc)
    assert found.before.count("tp", "rack") == 2
    assert (found.hosts, found.method) == (("a1", "a20", "a2", "a10"), "packed")


# -- the bound on every entry of the key, and what place certifies with it ----------------------


def _grid() -> tuple[Topology, Allocation]:
    """tp4 pp4 dp4 on sixteen 4-GPU hosts in racks of 5, 5 and 6: the 4 dp blocks (4 hosts, 4
    dp and 4 edp groups each) are the rows of a 4 x 4 grid of hosts, the 4 pp columns (4 groups
    each) its columns."""
    return Topology(64, tp=4, pp=4), _racks("aaaaabbbbbcccccc")


def test_rows_and_columns_that_no_rack_holds_together_exclude_each_other() -> None:
    """A row and a column share a host and need 4 + 4 - 1 = 7 > 6 hosts, so no rack keeps one
    of each: at most 3 rows (one per rack, 3 x 8 groups) or 3 columns (3 x 4) stay inside, and
    of the 32 + 16 pp/dp/edp groups at least 48 - 24 = 24 cross (not 48 - 24 - 12 = 12)."""
    topo, alloc = _grid()
    assert place(topo, alloc).bound == (0, 0, 24)


def test_place_certifies_the_entries_that_meet_their_bound() -> None:
    """16 hosts are past the exact search; place keeps 3 rows inside racks, 24 pp/dp/edp groups
    cross, which the bound proves least, so every entry is proven and the order optimal."""
    topo, alloc = _grid()
    found = place(topo, alloc)
    assert (found.after.key(), found.exact, found.proven, found.optimal) == (
        (0, 0, 24),
        False,
        (True, True, True),
        True,
    )
    assert found.to_dict()["optimality"] == {
        "exact": False,
        "optimal": True,
        "key": [
            {"class": "tp/etp", "tier": "rack", "crossing": 0, "bound": 0, "proven": True},
            {"class": "ep/cp", "tier": "rack", "crossing": 0, "bound": 0, "proven": True},
            {"class": "pp/dp/edp", "tier": "rack", "crossing": 24, "bound": 24, "proven": True},
        ],
    }


def test_an_entry_above_its_bound_is_not_proven() -> None:
    """The same order with a bound of 12 on the last entry: that entry is unproven (24 > 12),
    the others stay proven, and the order is not called optimal."""
    topo, alloc = _grid()
    found = attrs.evolve(place(topo, alloc), bound=(0, 0, 12))
    assert (found.proven, found.optimal) == ((True, True, False), False)


def test_an_exact_search_proves_every_entry_whatever_the_bound() -> None:
    """dp3 pp2 on three 2-GPU hosts in racks a, a, b: the dp groups (and edp, the same) run on
    slots {0, 1} and {1, 2}, the pp groups on {0, 1}, {0, 2} and {1, 2}, host sets that share
    hosts, so the bound counts only those no rack holds: none (0). Rack b's host on slot 0 or 2
    makes one dp set (2 groups) and 2 pp groups cross, on slot 1 both dp sets: 4 is least, and
    the exact search (3 hosts) proves it."""
    found = place(Topology(6, pp=2), _racks("aab", gpus=2))
    assert (found.after.key(), found.bound) == ((0, 0, 4), (0, 0, 0))
    assert found.exact and found.optimal
    assert found.proven == (True, True, True)


def test_a_bound_above_the_key_or_of_the_wrong_length_is_refused() -> None:
    """Arrangement.bound holds one int per key entry, each at most that entry."""
    found = place(Topology(16, tp=8), _racks("abab"))
    key = found.after.key()
    with pytest.raises(TopologyError, match=r"^Arrangement.bound must hold one int per entry"):
        attrs.evolve(found, bound=(0, 0, key[2] + 1))
    with pytest.raises(TopologyError, match=r"got \(0, 0\); pass None for no bound$"):
        attrs.evolve(found, bound=(0, 0))


def test_groups_kept_inside_by_an_earlier_class_glue_the_later_sets() -> None:
    """Eight slots in racks of 4: tp pairs {0, 1}, {2, 3}, {4, 5}, {6, 7} and dp sets {0, 2, 4,
    6}, {1, 3, 5, 7}. Alone, each dp set fits a rack (bound 0); on orders that keep every tp
    pair inside a rack (tp's entry 0), a dp set inside a rack would pull in every pair it
    touches, all 8 slots, so both dp sets cross (bound 2)."""
    tp = [((0, 1), (1, 0)), ((2, 3), (1, 0)), ((4, 5), (1, 0)), ((6, 7), (1, 0))]
    dp = [((0, 2, 4, 6), (0, 1)), ((1, 3, 5, 7), (0, 1))]
    racks = [[0, 0, 0, 0, 1, 1, 1, 1]]
    assert key_bound(racks, [tp, dp], 2) == (0, 0)
    assert key_bound(racks, [tp, dp], 2, (0, 2)) == (0, 2)
    assert key_bound(racks, [tp, dp], 2, (1, 0)) == (0, 0)


def test_kinds_that_share_hosts_bound_only_what_no_domain_holds() -> None:
    """Overlapping host sets (tp3 on 2-GPU hosts: slots {0, 1} and {1, 2}) of one kind: only a
    set larger than every domain must cross; here the racks hold 2 hosts, so none must."""
    family = [((0, 1), (1,)), ((1, 2), (1,))]
    assert key_bound([[0, 0, 1]], [family], 1) == (0,)
    assert key_bound([[0, 1, 2]], [family], 1) == (2,)


# -- the weights the swap search minimises -------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(topologies(max_world_size=32, max_rank_offset=0), st.sampled_from([1, 2, 4]))
def test_weighted_host_sets_count_the_groups_of_each_class(topo: Topology, gpus: int) -> None:
    """Summed per host set, the weights are, per kind class, the groups of its kinds that run on
    exactly those hosts (every group of every kind of the class, counted from the groups)."""
    slots = -(-topo.world_size // gpus)
    expected: dict[tuple[int, ...], Counter[int]] = {}
    for c, group in enumerate(KIND_CLASSES):
        for kind in group:
            if kind not in topo.kinds:
                continue
            for ranks in topo.groups(kind):
                hosts = tuple(sorted({r // gpus for r in ranks}))
                if len(hosts) > 1:
                    expected.setdefault(hosts, Counter())[c] += 1
    found: dict[tuple[int, ...], Counter[int]] = {}
    for hosts, weights in _Structure.of(topo, gpus, slots).weighted():
        for c, w in enumerate(weights):
            found.setdefault(hosts, Counter())[c] += w
    assert {h: +w for h, w in found.items()} == expected


# -- the Arrangement as JSON ----------------------------------------------------------------------


def test_arrangement_to_dict_by_hand() -> None:
    """tp8 dp2 on hosts n1 (r1), n2 (r2), n3 (r1), n4 (r2) of 4 GPUs. Listed: tp groups 0..7
    and 8..15 run on n1+n2 and n3+n4, both cross the rack; dp pairs {r, r+8} run on n1+n3 or
    n2+n4, inside a rack. Placed with each rack's hosts together: tp stays inside, every dp pair
    crosses. etp and edp repeat tp and dp; ep, cp and pp groups are single ranks."""
    racks = {"n1": "r1", "n2": "r2", "n3": "r1", "n4": "r2"}
    alloc = Allocation([Host(n, 4, (r,)) for n, r in racks.items()], [Tier("rack", nvlink=True)])
    found = place(Topology(16, tp=8), alloc)
    data = found.to_dict()
    assert (data["method"], data["improved"], data["unused"]) == (found.method, True, [])
    assert data["groups"] == {"tp": 2, "etp": 2, "ep": 16, "cp": 16, "pp": 16, "dp": 8, "edp": 8}
    fast = {"node": {"before": 2, "after": 2}, "rack": {"before": 2, "after": 0}}
    slow = {"node": {"before": 8, "after": 8}, "rack": {"before": 0, "after": 8}}
    none = {"node": {"before": 0, "after": 0}, "rack": {"before": 0, "after": 0}}
    assert data["crossings"] == {
        "tp": fast,
        "etp": fast,
        "ep": none,
        "cp": none,
        "pp": none,
        "dp": slow,
        "edp": slow,
    }
    assert data["step_time"] == {"before": None, "after": None}


# -- step_time ------------------------------------------------------------------------------------


def test_a_step_time_of_zero_seconds_is_accepted() -> None:
    """0 (an int) is a finite number of seconds >= 0 and is reported as 0.0."""
    found = place(Topology(4, tp=2), _racks("ab", gpus=2), step_time=lambda m: 0)
    assert (found.step_time_before, found.step_time_after) == (0.0, 0.0)
    assert type(found.step_time_after) is float


def test_a_step_time_below_one_second_is_accepted() -> None:
    """Half a second is as valid as any other finite time."""
    found = place(Topology(4, tp=2), _racks("ab", gpus=2), step_time=lambda m: 0.5)
    assert found.step_time_after == 0.5


def test_an_infinite_step_time_is_refused_and_shown() -> None:
    """inf is no finite number of seconds; the message shows the value returned."""
    with pytest.raises(TopologyError, match=r"finite number of seconds >= 0, got inf$"):
        place(Topology(4, tp=2), _racks("ab", gpus=2), step_time=lambda m: math.inf)


def test_a_step_time_that_is_not_callable_is_refused_before_placing() -> None:
    """step_time must be a callable; the message shows what was given."""
    with pytest.raises(
        TopologyError, match=r"^step_time must be a callable taking a RankMap, got 3"
    ):
        place(Topology(4, tp=2), _racks("ab", gpus=2), step_time=3)  # type: ignore[arg-type]


def test_hosts_all_alike_are_exact_without_a_search() -> None:
    """1,200 one-GPU hosts of unknown rack are one host type: every order crosses the same
    groups, so place is exact at once (the search, one level per slot, would recurse 1,200
    deep)."""
    alloc = Allocation([Host(f"n{i}", 1, (None,)) for i in range(1200)], [Tier("rack")])
    found = place(Topology(1200, tp=2), alloc)
    assert found.exact and found.method == "listed"
    assert found.after.count("tp", "rack") == 600
