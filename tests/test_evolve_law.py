"""Topology's fields hold what was given: evolve, to_dict and from_dict agree.

The law: ``attrs.evolve(t, f=v) == Topology(**{**t.to_dict(), f: v})`` whenever the left side is
valid; when only the right side is valid, the left failed because ``t`` was given a short order
that leaves out an axis the change needs (``to_dict`` writes the order in full). For a topology
rebuilt from its own ``to_dict`` the two sides always agree: both raise or both are equal.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Topology, TopologyError
from topology.strategies import topologies

BUDGET = settings.default.max_examples
LAWS = settings(max_examples=2 * BUDGET)

_SIZES = st.integers(1, 8)
_OPTIONAL = st.none() | _SIZES
_STAGES = st.lists(st.integers(-4, 4), min_size=1, max_size=3).map(tuple)
_ORDERS = st.permutations(["tp", "cp", "ep", "dp", "pp"]).flatmap(
    lambda tokens: st.integers(1, 5).map(lambda n: "-".join(tokens[:n]))
)

CHANGES: dict[str, st.SearchStrategy[Any]] = {
    "world_size": st.integers(1, 128),
    "tp": _SIZES,
    "pp": _SIZES,
    "cp": _SIZES,
    "ep": _SIZES,
    "etp": _OPTIONAL,
    "dp": st.none() | st.integers(1, 32),
    "vpp": st.none() | st.integers(1, 4),
    "order": _ORDERS,
    "rank_offset": st.integers(0, 16),
    "dist_opt_instances": st.integers(1, 4),
    "hcp_sizes": st.none() | st.lists(_SIZES, min_size=1, max_size=3).map(tuple),
    "embedding_stages": _STAGES,
    "position_embedding_stages": _STAGES,
}
"""Every field and values to change it to (often invalid: the law says what happens then)."""

changes = st.sampled_from(sorted(CHANGES)).flatmap(
    lambda field: CHANGES[field].map(lambda value: (field, value))
)


def build(make: Any) -> Topology | str:
    """The topology ``make()`` returns, or the message of the TopologyError it raises."""
    try:
        topo = make()
    except TopologyError as error:
        return str(error)
    assert isinstance(topo, Topology)
    return topo


def sides(topo: Topology, field: str, value: Any) -> tuple[Topology | str, Topology | str]:
    """(evolve(topo, field=value), Topology(**{**to_dict, field: value})), each or its error."""
    left = build(lambda: attrs.evolve(topo, **{field: value}))
    right = build(lambda: Topology(**{**topo.to_dict(), field: value}))
    return left, right


# -- laws ------------------------------------------------------------------------------------------


@LAWS
@given(topologies(), changes)
def test_a_valid_evolve_equals_the_rebuilt_dict(topo: Topology, change: tuple[str, Any]) -> None:
    """Whenever evolve(t, f=v) is valid, Topology(**{**t.to_dict(), f: v}) is valid and equal."""
    left, right = sides(topo, *change)
    if isinstance(left, Topology):
        assert right == left
        assert isinstance(right, Topology) and hash(right) == hash(left)


@LAWS
@given(topologies(), changes)
def test_a_valid_rebuilt_dict_fails_evolve_only_for_a_short_order(
    topo: Topology, change: tuple[str, Any]
) -> None:
    """When only the dict side is valid, evolve kept a given order that leaves out an axis."""
    field, value = change
    left, right = sides(topo, field, value)
    if isinstance(right, Topology) and isinstance(left, str):
        assert "leaves out" in left, left
        assert attrs.evolve(topo, **{"order": topo.order, field: value}) == right


@LAWS
@given(topologies(), changes)
def test_both_sides_agree_on_a_topology_from_its_dict(
    topo: Topology, change: tuple[str, Any]
) -> None:
    """For from_dict(to_dict(t)), evolve and the rebuilt dict both raise (alike) or are equal."""
    again = Topology.from_dict(topo.to_dict())
    left, right = sides(again, *change)
    assert left == right


@LAWS
@given(topologies())
def test_dict_round_trip_is_identity(topo: Topology) -> None:
    """from_dict(to_dict(t)) == t with the same hash, the same dict and the same text."""
    again = Topology.from_dict(json.loads(json.dumps(topo.to_dict())))
    assert again == topo and hash(again) == hash(topo)
    assert again.to_dict() == topo.to_dict()
    assert (repr(again), str(again)) == (repr(topo), str(topo))


@LAWS
@given(topologies())
def test_evolve_without_changes_is_identity(topo: Topology) -> None:
    """evolve(t) == t and keeps every value as given (its dict is t's)."""
    same = attrs.evolve(topo)
    assert same == topo and same.to_dict() == topo.to_dict()


@LAWS
@given(topologies())
def test_resolved_values_have_their_types(topo: Topology) -> None:
    """dp and etp are ints, order names all five axes, the stages are ascending tuples."""
    assert type(topo.dp) is int and topo.dp * topo.tp * topo.cp * topo.pp == topo.world_size
    assert type(topo.etp) is int and topo.edp * topo.etp * topo.ep * topo.pp == topo.world_size
    assert sorted(topo.order.split("-")) == ["cp", "dp", "ep", "pp", "tp"]
    for stages in (topo.embedding_stages, topo.position_embedding_stages):
        assert isinstance(stages, tuple) and list(stages) == sorted(set(stages))
        assert all(0 <= s < topo.pp for s in stages)


# -- examples --------------------------------------------------------------------------------------


def test_evolve_changes_pp_and_rederives_dp_and_stages() -> None:
    """evolve(Topology(16, tp=2, pp=4), pp=2) has dp 4 and embedding stages (0, 1)."""
    topo = attrs.evolve(Topology(16, tp=2, pp=4), pp=2)
    assert topo == Topology(16, tp=2, pp=2)
    assert (topo.dp, topo.embedding_stages) == (4, (0, 1))


def test_evolve_tp_rederives_an_etp_that_was_not_given() -> None:
    """etp follows tp when it was not given, and stays when it was."""
    assert attrs.evolve(Topology(8, tp=2), tp=4).etp == 4
    assert attrs.evolve(Topology(8, tp=2, etp=2), tp=4).etp == 2


def test_evolve_keeps_a_given_dp_checked() -> None:
    """A dp that was given is still checked after a change."""
    with pytest.raises(TopologyError, match=r"dp\(4\) does not match"):
        attrs.evolve(Topology(8, tp=2, dp=4), tp=4)


def test_equality_compares_the_resolved_values() -> None:
    """Giving a derived value (dp, etp, order, stages) changes nothing: equal, same hash, text."""
    plain = Topology(8, tp=2)
    spelled = [
        Topology(8, tp=2, dp=4),
        Topology(8, tp=2, etp=2),
        Topology(8, tp=2, order="tp-cp-ep-dp"),
        Topology(8, tp=2, embedding_stages=(0, 0)),
    ]
    for other in spelled:
        assert other == plain and hash(other) == hash(plain)
        assert (repr(other), str(other)) == (
            "Topology(8, tp=2)",
            "tp2·cp1·ep1·dp4·pp1 (tp fastest)",
        )
    assert Topology(8, tp=2) != Topology(8, tp=2, etp=1)


def test_to_dict_holds_the_given_values_and_the_full_order() -> None:
    """to_dict keeps dp, etp and stages as given and writes the order out in full."""
    assert Topology(16, tp=2, pp=4, order="tp-pp-dp").to_dict() == {
        "world_size": 16,
        "tp": 2,
        "pp": 4,
        "cp": 1,
        "ep": 1,
        "etp": None,
        "dp": None,
        "vpp": None,
        "order": "tp-pp-dp-ep-cp",
        "rank_offset": 0,
        "dist_opt_instances": 1,
        "hcp_sizes": None,
        "embedding_stages": [0, -1],
        "position_embedding_stages": [0],
        "gtp": 1,
        "egtp": 1,
    }
    assert Topology(8, tp=2, dp=4, etp=1).to_dict()["dp"] == 4


def test_constructor_keywords_are_the_public_names() -> None:
    """attrs sees the fields under their public keywords, in the constructor's order."""
    aliases = [f.alias for f in attrs.fields(Topology) if f.init]
    assert aliases == list(Topology(1).to_dict())
