"""Multi-module layouts: laws of Module, Modules and their creation schedule, golden cases, errors.

Laws first (spans tile the world; every group is the module's own group shifted by its offset;
the schedule makes every group of size >= 2 exactly once, in disjoint calls, and needs at most
as many calls as the largest module has kinds when the modules are disjoint), then golden
schedules of Megatron's MIMO shapes, then each error message.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import AxisGroups, Creation, Grid, Module, Modules, Topology, TopologyError
from topology.strategies import modules

LAWS = settings(max_examples=25)


def _at_zero(layout: Topology | AxisGroups) -> Topology | AxisGroups:
    """The same layout starting at rank 0."""
    if isinstance(layout, Topology):
        return attrs.evolve(layout, rank_offset=0)
    return AxisGroups(attrs.evolve(layout.grid, rank_offset=0), kinds=layout.kinds)


def _wanted(mods: Modules, spans: bool) -> dict[tuple[int, ...], set[tuple[str, str]]]:
    """Every group of size >= 2 the modules need, with the (module, kind) pairs that use it."""
    wanted: dict[tuple[int, ...], set[tuple[str, str]]] = {}
    for module in mods.modules:
        for kind in module.kinds:
            for group in module.groups(kind):
                if len(group) >= 2:
                    wanted.setdefault(tuple(group), set()).add((module.name, kind))
        if spans and module.world_size >= 2:
            wanted.setdefault(tuple(module.span), set()).add((module.name, "span"))
    return wanted


# -- laws ------------------------------------------------------------------------------------------


@LAWS
@given(modules())
def test_spans_tile_the_world(mods: Modules) -> None:
    """Every rank of [0, world_size) is served by one module (disjoint) or all (colocated)."""
    for rank in range(mods.world_size):
        served = mods.serves(rank)
        assert served == (mods.names if mods.colocated else served)
        assert len(served) == (len(mods.modules) if mods.colocated else 1)
    assert sum(m.world_size for m in mods.modules) == mods.world_size or mods.colocated


@LAWS
@given(modules(), st.data())
def test_groups_are_the_module_groups_shifted_by_its_offset(
    mods: Modules, data: st.DataObject
) -> None:
    """group_of(rank, module, kind) is the layout's own group at rank 0, shifted by the offset."""
    rank = data.draw(st.integers(0, mods.world_size - 1))
    for name in mods.serves(rank):
        module = mods.module(name)
        base, shift = _at_zero(module.layout), module.rank_offset
        for kind in module.kinds:
            if not module.has_group(rank, kind):
                assert not base.has_group(rank - shift, kind)
                continue
            own = base.group_of(rank - shift, kind)
            assert mods.group_of(rank, name, kind) == tuple(r + shift for r in own)
            assert rank in mods.group_of(rank, name, kind)


@LAWS
@given(modules(), st.booleans())
def test_the_schedule_makes_every_group_once_in_disjoint_calls(mods: Modules, spans: bool) -> None:
    """Each call holds pairwise-disjoint sorted groups of >= 2 ranks; each group is in one call."""
    calls = mods.schedule(spans=spans)
    made = [group for call in calls for group in call.groups]
    assert len(made) == len(set(made))
    for call in calls:
        assert call.groups and list(call.groups) == sorted(call.groups)
        ranks = [r for group in call.groups for r in group]
        assert len(ranks) == len(set(ranks))
        assert all(len(g) >= 2 and list(g) == sorted(g) for g in call.groups)


@LAWS
@given(modules(), st.booleans())
def test_every_module_group_is_served_by_exactly_one_call(mods: Modules, spans: bool) -> None:
    """Every (module, kind, group of >= 2 ranks) is served by the one call that holds that set."""
    calls = mods.schedule(spans=spans)
    served = {
        group: set(uses)
        for call in calls
        for group, uses in zip(call.groups, call.served, strict=True)
    }
    assert served == _wanted(mods, spans)


@LAWS
@given(modules(colocated=False), st.booleans())
def test_disjoint_modules_need_at_most_the_largest_kind_count(mods: Modules, spans: bool) -> None:
    """Disjoint modules share calls kind by kind: calls <= the largest module's kind count."""
    calls = mods.schedule(spans=spans)
    assert len(calls) <= max(len(m.kinds) + spans for m in mods.modules)


@LAWS
@given(modules(colocated=True))
def test_colocated_modules_share_their_span(mods: Modules) -> None:
    """Colocated modules all span [0, world_size); a shared span is one communicator."""
    assert mods.colocated and all(m.span == range(mods.world_size) for m in mods.modules)
    span_calls = [c for c in mods.schedule(spans=True) if tuple(range(mods.world_size)) in c.groups]
    assert len(span_calls) == (1 if mods.world_size >= 2 else 0)


# -- golden ----------------------------------------------------------------------------------------

MIMO = Modules(
    [
        Module("vision", Topology(8)),
        Module("language", Topology(8, tp=2, pp=2), rank_offset=8),
    ]
)


def test_mimo_vision_and_language_schedule() -> None:
    """A dp-8 encoder beside a tp-2 pp-2 language model: 5 calls, the language model's 5 sets."""
    calls = MIMO.schedule()
    assert [call.groups for call in calls] == [
        ((0, 1, 2, 3, 4, 5, 6, 7), (8, 10), (9, 11), (12, 14), (13, 15)),
        ((8, 9, 12, 13), (10, 11, 14, 15)),
        ((8, 9), (10, 11), (12, 13), (14, 15)),
        ((8, 12), (9, 13), (10, 14), (11, 15)),
        ((8, 9, 10, 11), (12, 13, 14, 15)),
    ]
    assert set(calls[0].uses_of(range(8))) == {
        ("vision", kind) for kind in ("dp", "dp-cp", "tp-dp", "tp-dp-cp", "edp")
    }
    assert ("language", "embedding") in calls[3].uses
    assert MIMO.group_of(13, "language", "tp") == (12, 13)
    assert MIMO.group_of(13, "language", "pp") == (9, 13)
    assert MIMO.serves(3) == ("vision",) and MIMO.serves(8) == ("language",)
    assert not MIMO.colocated and MIMO.world_size == 16 and MIMO.names == ("vision", "language")


def test_colocated_modules_share_equal_groups() -> None:
    """Two colocated modules with the same tp groups make them once, serving both."""
    mods = Modules([Module("a", Topology(8, tp=2)), Module("b", Topology(8, tp=2, pp=2))])
    owner = [c for c in mods.schedule() if (0, 1) in c.groups]
    assert len(owner) == 1
    assert {("a", "tp"), ("b", "tp")} <= set(owner[0].uses_of((0, 1)))
    assert mods.colocated and mods.serves(5) == ("a", "b")


def test_an_axis_groups_module_keeps_its_grid_offset() -> None:
    """A grid that starts at rank 8 places its module at 8 (rank_offset=0 keeps it)."""
    layout = AxisGroups(Grid.from_sizes(data=2, model=2, rank_offset=8))
    kept, moved = Module("m", layout), Module("m", AxisGroups(Grid.from_sizes(data=2, model=2)), 8)
    assert kept == moved and kept.span == range(8, 12) and kept.group_of(9, "model") == (8, 9)
    assert Module("m", layout, rank_offset=8) == kept


def test_span_groups_are_megatrons_intra_dist_opt() -> None:
    """spans=True adds each module's span, once, used as (module, 'span')."""
    calls = MIMO.schedule(spans=True)
    owners = [c.uses_of(tuple(range(8, 16))) for c in calls if tuple(range(8, 16)) in c.groups]
    assert len(owners) == 1 and ("language", "span") in owners[0]


def test_creation_is_a_value() -> None:
    """A Creation answers group_of and uses_of, and refuses a group it does not make."""
    call = Creation(((0, 1), (2, 3)), ((("a", "tp"),), (("b", "dp"),)))
    assert call.group_of(2) == (2, 3) and call.group_of(9) is None
    assert call.uses == (("a", "tp"), ("b", "dp"))
    with pytest.raises(TopologyError, match=r"group \(0, 2\) is not made by this call"):
        call.uses_of((0, 2))


# -- errors ----------------------------------------------------------------------------------------

ERRORS = [
    (lambda: Module("", Topology(8)), r"a module name must be a non-empty string, got ''"),
    (lambda: Module("a", 8), r"module 'a' needs a topology.Topology or topology.AxisGroups"),
    (
        lambda: Module("a", Topology(8, rank_offset=8), rank_offset=4),
        r"module 'a' has rank_offset=4 but its layout starts at rank 8; give the offset once",
    ),
    (lambda: Module("a", Topology(8), rank_offset=-1), r"rank_offset must be a non-negative int"),
    (lambda: Modules([]), r"modules must hold at least one topology.Module, got none"),
    (lambda: Modules(Module("a", Topology(8))), r"modules must be a sequence of topology.Module"),
    (lambda: Modules([Topology(8)]), r"modules must hold only topology.Module values"),
    (
        lambda: Modules([Module("a", Topology(8)), Module("a", Topology(8), rank_offset=8)]),
        r"module name 'a' is used twice in \['a', 'a'\]; give each module its own name",
    ),
    (
        lambda: Modules([Module("a", Topology(8)), Module("b", Topology(8), rank_offset=4)]),
        r"modules 'a' \[0, 8\) and 'b' \[4, 12\) overlap without sharing their span",
    ),
    (
        lambda: Modules([Module("a", Topology(8)), Module("b", Topology(8), rank_offset=10)]),
        r"ranks \[8, 10\) are in no module \(the next, 'b', starts at rank 10\); .* "
        r"set 'b''s rank_offset=8",
    ),
    (
        lambda: Modules([Module("a", Topology(8), rank_offset=8)]),
        r"colocated modules span \[8, 16\), which leaves ranks \[0, 8\) in no module",
    ),
    (lambda: MIMO.serves(16), r"rank 16 is outside the modules' world \[0, 16\)"),
    (
        lambda: MIMO.module("audio"),
        r"no module is called 'audio'; the modules are vision, language",
    ),
    (
        lambda: MIMO.group_of(3, "language", "tp"),
        r"rank 3 is not in module 'language', which spans ranks \[8, 16\)",
    ),
    (lambda: MIMO.group_of(9, "language", "nope"), r"nope"),
]


@pytest.mark.parametrize(("make", "message"), ERRORS)
def test_invalid_input_raises_a_topology_error(make: object, message: str) -> None:
    """Each invalid input raises TopologyError with its one-sentence message."""
    with pytest.raises(TopologyError, match=message):
        make()  # type: ignore[operator]
