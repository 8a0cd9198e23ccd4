"""``topology.mimo_layout``: Megatron MIMO's ``ModuleGridSpec`` fields read as a Topology, one
table for the modules file and the adapter's ``ModuleGridSpec`` (issue 33 item 5)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology import Topology, TopologyError, mimo_layout

VALID = "cp, ep, expt_gtp_remat, expt_tp, gtp_remat, num_ranks, pp, rank_offset, tp"


@given(
    st.fixed_dictionaries(
        {},
        optional={
            "tp": st.sampled_from([1, 2]),
            "cp": st.sampled_from([1, 2]),
            "pp": st.sampled_from([1, 2]),
            "ep": st.sampled_from([1, 2]),
            "gtp_remat": st.sampled_from([1, 2]),
            "expt_tp": st.sampled_from([1, 2]),
            "expt_gtp_remat": st.sampled_from([1, 2]),
            "rank_offset": st.integers(0, 3),
        },
    )
)
def test_each_field_is_its_topology_field(fields: dict[str, int]) -> None:
    """Written out by hand from MIMO's ModuleGridSpec: num_ranks is world_size, gtp_remat gtp,
    expt_tp etp (1 unless given: MIMO's default), expt_gtp_remat egtp; the others by name."""
    given = {"num_ranks": 64, **fields}
    expected = Topology(
        64,
        tp=fields.get("tp", 1),
        cp=fields.get("cp", 1),
        pp=fields.get("pp", 1),
        ep=fields.get("ep", 1),
        gtp=fields.get("gtp_remat", 1),
        etp=fields.get("expt_tp", 1),
        egtp=fields.get("expt_gtp_remat", 1),
        rank_offset=fields.get("rank_offset", 0),
    )
    assert mimo_layout(given) == expected


def test_mimo_default_expert_tp_is_one_not_tp() -> None:
    """A Topology takes etp = tp when not given; MIMO takes expt_tp 1."""
    assert mimo_layout({"num_ranks": 8, "tp": 2}).etp == 1
    assert Topology(8, tp=2).etp == 2


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ([("num_ranks", 8)], "MIMO fields must be a mapping of ModuleGridSpec fields, got list"),
        (
            {"num_ranks": 8, "etp": 2},
            "MIMO's ModuleGridSpec has no field 'etp' (this project's name for 'expt_tp'); "
            f"valid: {VALID}",
        ),
        (
            {"num_ranks": 8, "world_size": 8},
            "MIMO's ModuleGridSpec has no field 'world_size' (this project's name for "
            f"'num_ranks'); valid: {VALID}",
        ),
        ({"num_ranks": 8, "foo": 1}, f"MIMO's ModuleGridSpec has no field 'foo'; valid: {VALID}"),
        ({"tp": 2}, "a MIMO module needs num_ranks (its number of ranks)"),
    ],
)
def test_bad_fields_are_one_line_naming_the_field(fields: object, message: str) -> None:
    with pytest.raises(TopologyError) as error:
        mimo_layout(fields)  # type: ignore[arg-type]
    assert str(error.value) == message
