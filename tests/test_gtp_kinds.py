"""Megatron's GTP axes (gtp, egtp) as kinds: laws first, then worked layouts and pinned errors.

The differential test against megatron-core 0.19.2 is ``test_gtp_megatron.py``.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings

from topology import Topology, TopologyError
from topology.strategies import topologies

GTP = topologies(max_world_size=64, kinds=["gtp"], gtp=True)
EGTP = topologies(max_world_size=64, kinds=["egtp"], gtp=True)
ANY = topologies(max_world_size=64, gtp=True)
LAWS = settings(max_examples=60, deadline=None)

# Each GTP kind and the plain kind (grid, axes) it widens by its GTP axis.
WIDENS = {
    "gtp-dp": ("dense", ("dp",)),
    "gtp-dp-cp": ("dense", ("dp", "cp")),
    "tp-pp": ("dense", ("tp", "pp")),
    "tp-dp": ("dense", ("tp", "dp")),
    "tp-dp-cp": ("dense", ("tp", "dp", "cp")),
    "egtp-edp": ("expert", ("edp",)),
    "etp-ep-egtp-pp": ("expert", ("etp", "ep", "pp")),
}

GTP_KINDS = ("gtp", "gtp-dp", "gtp-dp-cp", "egtp", "egtp-edp", "etp-ep-egtp-pp")


def _partition(topo: Topology, kind: str) -> None:
    members = [r for group in topo.groups(kind) for r in group]
    assert sorted(members) == list(range(topo.rank_offset, topo.rank_offset + topo.world_size))


# -- laws -------------------------------------------------------------------------------------


@LAWS
@given(ANY)
def test_gtp_kinds_exist_exactly_when_their_axis_does(topo: Topology) -> None:
    """gtp, gtp-dp, gtp-dp-cp need gtp > 1; egtp, egtp-edp, etp-ep-egtp-pp need egtp > 1."""
    for kind in GTP_KINDS:
        size = topo.egtp if kind.startswith(("egtp", "etp")) else topo.gtp
        assert (kind in topo.kinds) == (size > 1), kind
    assert ("gtp" in topo.dense.axes) == (topo.gtp > 1)
    assert (topo.expert is not None and "egtp" in topo.expert.axes) == (topo.egtp > 1)


@LAWS
@given(GTP)
def test_dense_gtp_kinds_partition_the_ranks_and_multiply_out(topo: Topology) -> None:
    """Each dense GTP kind partitions the layout; sizes are the products of their axes."""
    sizes = {
        "gtp": topo.gtp,
        "gtp-dp": topo.gtp * topo.dp,
        "gtp-dp-cp": topo.gtp * topo.dp * topo.cp,
        "tp-pp": topo.tp * topo.gtp * topo.pp,
        "tp-dp": topo.tp * topo.gtp * topo.dp,
        "tp-dp-cp": topo.tp * topo.gtp * topo.dp * topo.cp,
    }
    assert topo.world_size == topo.tp * topo.gtp * topo.cp * topo.dp * topo.pp
    for kind, size in sizes.items():
        _partition(topo, kind)
        assert topo.size(kind) == size, kind
        assert len(topo.groups(kind)) * size == topo.world_size


@LAWS
@given(EGTP)
def test_expert_gtp_kinds_partition_the_ranks_and_multiply_out(topo: Topology) -> None:
    """Each expert GTP kind partitions the layout; edp is the replicate degree."""
    sizes = {
        "egtp": topo.egtp,
        "egtp-edp": topo.egtp * topo.edp,
        "etp-ep-egtp-pp": topo.etp * topo.ep * topo.egtp * topo.pp,
    }
    assert topo.world_size == topo.etp * topo.ep * topo.egtp * topo.edp * topo.pp
    for kind, size in sizes.items():
        _partition(topo, kind)
        assert topo.size(kind) == size, kind


@LAWS
@given(ANY)
def test_kinds_spanning_gtp_are_the_union_over_gtp_peers(topo: Topology) -> None:
    """tp-pp (and every kind that spans a GTP axis) is the union of the plain groups of the
    rank's GTP peers."""
    for rank in (topo.rank_offset, topo.rank_offset + topo.world_size - 1):
        for kind, (which, axes) in WIDENS.items():
            if kind not in topo.kinds:
                continue
            grid = topo.dense if which == "dense" else topo.expert
            assert grid is not None
            peers_kind = "gtp" if which == "dense" else "egtp"
            peers = topo.group_of(rank, peers_kind) if peers_kind in topo.kinds else (rank,)
            union = {r for peer in peers for r in grid.group_of(peer, *axes)}
            assert set(topo.group_of(rank, kind)) == union, kind


@LAWS
@given(topologies(max_world_size=64, gtp=False))
def test_gtp_and_egtp_of_one_change_nothing(topo: Topology) -> None:
    """gtp=1 and egtp=1 given or left out: same layout, same kinds, same groups, no GTP axis."""
    data = topo.to_dict()
    assert (data["gtp"], data["egtp"]) == (1, 1)
    del data["gtp"], data["egtp"]
    plain = Topology(**data)
    assert plain == topo
    assert plain.kinds == topo.kinds
    assert not set(GTP_KINDS) & set(topo.kinds)
    assert "gtp" not in topo.dense.axes and "gtp" not in topo.order
    for kind in topo.kinds:
        assert list(plain.groups(kind)) == list(topo.groups(kind)), kind
        assert topo.kind(kind).axes == plain.kind(kind).axes


@LAWS
@given(ANY)
def test_gtp_round_trips_through_to_dict(topo: Topology) -> None:
    """to_dict holds gtp and egtp as JSON ints; from_dict gives the same layout and groups."""
    data = topo.to_dict()
    assert type(data["gtp"]) is int and type(data["egtp"]) is int
    again = Topology.from_dict(data)
    assert again == topo and again.order == topo.order
    assert [list(again.groups(k)) for k in again.kinds] == [
        list(topo.groups(k)) for k in topo.kinds
    ]


# -- worked layouts, from the definition --------------------------------------------------------


def test_worked_dense_gtp_layout() -> None:
    """W=16, tp=2, gtp=2, pp=2: order tp-gtp-cp-ep-dp-pp, rank = tp + 2 gtp + 4 dp + 8 pp."""
    topo = Topology(16, tp=2, gtp=2, pp=2)
    assert topo.order == "tp-gtp-cp-ep-dp-pp"
    assert topo.dp == 2 and topo.edp == 4
    assert str(topo) == "tp2·gtp2·cp1·ep1·dp2·pp2 (tp fastest)"
    assert repr(topo) == "Topology(16, tp=2, pp=2, gtp=2, order='tp-gtp-cp-ep-dp-pp')"
    golden = {
        "gtp": [(0, 2), (1, 3), (4, 6), (5, 7), (8, 10), (9, 11), (12, 14), (13, 15)],
        "dp": [(0, 4), (1, 5), (2, 6), (3, 7), (8, 12), (9, 13), (10, 14), (11, 15)],
        "gtp-dp": [(0, 2, 4, 6), (1, 3, 5, 7), (8, 10, 12, 14), (9, 11, 13, 15)],
        "gtp-dp-cp": [(0, 2, 4, 6), (1, 3, 5, 7), (8, 10, 12, 14), (9, 11, 13, 15)],
        "tp-pp": [(0, 1, 2, 3, 8, 9, 10, 11), (4, 5, 6, 7, 12, 13, 14, 15)],
        "tp": [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11), (12, 13), (14, 15)],
        "pp": [(0, 8), (1, 9), (2, 10), (3, 11), (4, 12), (5, 13), (6, 14), (7, 15)],
        "tp-dp": [tuple(range(8)), tuple(range(8, 16))],
        "tp-dp-cp": [tuple(range(8)), tuple(range(8, 16))],
        "edp": [(0, 2, 4, 6), (1, 3, 5, 7), (8, 10, 12, 14), (9, 11, 13, 15)],
        "etp-ep-pp": [(0, 1, 8, 9), (2, 3, 10, 11), (4, 5, 12, 13), (6, 7, 14, 15)],
    }
    for kind, groups in golden.items():
        assert list(topo.groups(kind)) == groups, kind
    assert topo.kinds == (
        "gtp", "dp-cp", "dp", "gtp-dp", "gtp-dp-cp", "cp", "tp-pp", "tp", "pp", "embedding",
        "position-embedding", "tp-dp-cp", "tp-dp", "tp-cp", "ep", "etp", "etp-ep", "etp-ep-pp",
        "edp",
    )  # fmt: skip
    assert topo.kind("mp").axes == ("tp", "gtp", "pp")


def test_worked_expert_gtp_layout() -> None:
    """W=16, ep=2, egtp=2, pp=2: expert order etp-ep-egtp-edp-pp, rank = ep + 2 egtp + 4 edp
    + 8 pp; the dense grid has no gtp axis."""
    topo = Topology(16, ep=2, egtp=2, pp=2)
    assert topo.order == "tp-cp-ep-egtp-dp-pp"
    assert topo.dp == 8 and topo.edp == 2
    golden = {
        "egtp": [(0, 2), (1, 3), (4, 6), (5, 7), (8, 10), (9, 11), (12, 14), (13, 15)],
        "ep": [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11), (12, 13), (14, 15)],
        "edp": [(0, 4), (1, 5), (2, 6), (3, 7), (8, 12), (9, 13), (10, 14), (11, 15)],
        "egtp-edp": [(0, 2, 4, 6), (1, 3, 5, 7), (8, 10, 12, 14), (9, 11, 13, 15)],
        "etp-ep-pp": [(0, 1, 8, 9), (2, 3, 10, 11), (4, 5, 12, 13), (6, 7, 14, 15)],
        "etp-ep-egtp-pp": [(0, 1, 2, 3, 8, 9, 10, 11), (4, 5, 6, 7, 12, 13, 14, 15)],
        "dp": [tuple(range(8)), tuple(range(8, 16))],
        "tp-pp": [(r, r + 8) for r in range(8)],
    }
    for kind, groups in golden.items():
        assert list(topo.groups(kind)) == groups, kind
    assert "gtp" not in topo.kinds and "intra-dist-opt" not in topo.kinds


@pytest.mark.parametrize(
    ("order", "resolved"),
    [
        ("tp-cp-ep-dp-pp", "tp-gtp-cp-ep-egtp-dp-pp"),
        ("tp-pp-dp", "tp-egtp-gtp-pp-dp-ep-cp"),
        ("ep-tp-dp-pp", "ep-egtp-tp-gtp-dp-pp-cp"),
        ("tp-gtp_remat-cp-ep-dp-pp", "tp-gtp-egtp-cp-ep-dp-pp"),
        ("tp-cp-ep-gtp-dp-pp", "tp-cp-ep-egtp-gtp-dp-pp"),
    ],
)
def test_gtp_axes_go_where_megatron_injects_them(order: str, resolved: str) -> None:
    """gtp right after tp, egtp right after ep (else tp), unless named; gtp_remat names both."""
    assert Topology(8, gtp=2, egtp=2, order=order).order == resolved


def test_canonical_names_of_gtp_kinds() -> None:
    """Token orders and Megatron's names reach the GTP kinds; tp-gtp-pp is tp-pp."""
    topo = Topology(16, tp=2, gtp=2, ep=2, egtp=2)
    for name, kind in [
        ("dp-gtp", "gtp-dp"),
        ("cp-dp-gtp", "gtp-dp-cp"),
        ("gtp_remat", "gtp"),
        ("gtp_remat_dp_cp", "gtp-dp-cp"),
        ("pp-gtp-tp", "tp-pp"),
        ("tp-gtp-dp", "tp-dp"),
        ("expt_gtp_remat", "egtp"),
        ("edp-egtp", "egtp-edp"),
        ("tp_ep_gtp_remat_pp", "etp-ep-egtp-pp"),
        ("pp-egtp-ep-etp", "etp-ep-egtp-pp"),
    ]:
        assert list(topo.groups(name)) == list(topo.groups(kind)), name


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"world_size": 16, "gtp": 2, "dist_opt_instances": 2},
            "dist_opt_instances(2) needs gtp = egtp = 1 (Megatron supports GTP with one "
            "distributed-optimizer instance), but gtp is 2 and egtp is 1; pass "
            "dist_opt_instances=1 or gtp=1 and egtp=1",
        ),
        (
            {"world_size": 12, "tp": 2, "gtp": 4},
            "world_size 12 is not divisible by tp(2) * cp(1) * pp(1) * gtp(4) = 8; valid world "
            "sizes are multiples of 8",
        ),
        (
            {"world_size": 16, "tp": 2, "gtp": 2, "dp": 8},
            "dp(8) does not match world_size 16 / (tp(2) * cp(1) * pp(1) * gtp(2)) = 4; leave dp "
            "out or pass dp=4",
        ),
        (
            {"world_size": 16, "ep": 4, "egtp": 8},
            "world_size 16 is not divisible by etp(1) * ep(4) * pp(1) * egtp(8) = 32; valid ep: "
            "1, 2",
        ),
        (
            {"world_size": 8, "gtp": 2, "order": "dp-pp"},
            "order 'dp-pp' leaves out 'tp' but gtp is 2 and Megatron places the GTP axes by "
            "'tp'; add 'tp' to the order, e.g. 'tp-dp-pp'",
        ),
        (
            {"world_size": 16, "pp": 2, "gtp": 2, "order": "tp-cp-ep-pp-dp"},
            "edp(8) must equal dp(4) when pp is not the outermost axis of order "
            "'tp-gtp-cp-ep-pp-dp'; put pp last in the order or make etp * ep = tp * cp * gtp",
        ),
        ({"world_size": 8, "gtp": 0}, "gtp must be a positive int, got 0 (int)"),
        ({"world_size": 8, "egtp": True}, "egtp must be a positive int, got True (bool)"),
    ],
)
def test_gtp_errors_are_pinned(kwargs: dict[str, object], message: str) -> None:
    """Each GTP error shows the arithmetic with the GTP factor and ends with the fix."""
    with pytest.raises(TopologyError, match=f"^{re.escape(message)}$"):
        Topology(**kwargs)  # type: ignore[arg-type]
