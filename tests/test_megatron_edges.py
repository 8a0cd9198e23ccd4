"""Edges of the Megatron layer (kind table rows, Topology texts and lookups, the pipeline view)
that mutation testing found untested.

Expected values are worked out by hand: Megatron's ``is_rank_in_embedding_group`` for the
embedding rules, the documented ``repr`` format for long tuples, the kind table's documented
rows (Megatron's process-group names) for the row helpers.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings

from topology import Topology, TopologyError
from topology._layout.runs import Runs
from topology._megatron import kinds
from topology._megatron.kinds import KindSpec
from topology._megatron.pipeline import Pipeline, virtual_layers
from topology._megatron.shapes import shape_of
from topology.strategies import topologies

BUDGET = settings().max_examples  # the loaded profile's budget (fewer under `mutation`)


def _points(runs: Runs) -> list[int]:
    """Every point of ``runs``, listed with itertools (independent of the runs module)."""
    digits = [range(size) for size, _ in runs]
    return [
        sum(c * d for c, (_, d) in zip(cs, runs, strict=True)) for cs in itertools.product(*digits)
    ]


def test_dense_row_helper_spells_a_dense_kind() -> None:
    """_dense(name, axes, *megatron) is the dense-grid row with those Megatron names."""
    row = kinds._dense("tp-dp", ("tp", "dp"), "tp_dp", "tensor_and_data")
    assert row == KindSpec(
        name="tp-dp", megatron_names=("tp_dp", "tensor_and_data"), grid="dense", axes=("tp", "dp")
    )


def test_expert_row_helper_spells_an_expert_kind() -> None:
    """_expert(name, axes, dense, *megatron) is the expert-grid row with its dense meaning."""
    row = kinds._expert("etp", ("etp",), ("tp",), "expt_tp")
    assert row == KindSpec(
        name="etp", megatron_names=("expt_tp",), grid="expert", axes=("etp",), dense_axes=("tp",)
    )


def test_dist_opt_row_helper_spells_a_derived_kind() -> None:
    """_dist_opt(name, derived, *megatron) is a derived row that needs dist_opt_instances."""
    derived = kinds.spec_of("intra-edp").derived
    assert derived is not None
    row = kinds._dist_opt("intra-edp", derived, "intra_expt_dp")
    assert row == KindSpec(
        name="intra-edp",
        megatron_names=("intra_expt_dp",),
        derived=derived,
        needs="dist_opt_instances",
    )


def test_megatron_constructor_is_the_plain_constructor() -> None:
    """Topology.megatron(...) is Topology(...) with the same arguments."""
    assert Topology.megatron(16, tp=2, pp=2, cp=2) == Topology(16, tp=2, pp=2, cp=2)
    assert Topology.megatron(8).world_size == 8


def test_named_layouts_keep_their_order() -> None:
    """ml_starter and ezpz give the orders their docstrings name, in lower case."""
    assert Topology.ml_starter(8, 2, 2).order.startswith("tp-pp-dp")
    assert Topology.ezpz(16, tp=2, pp=2, cp=2).order.startswith("tp-cp-pp-dp")


def test_from_dict_without_world_size_says_so() -> None:
    """A dict without world_size is refused with an example of the key."""
    with pytest.raises(TopologyError, match=r"^a topology needs 'world_size', e\.g\. "):
        Topology.from_dict({"tp": 2})


def test_repr_of_a_long_stage_tuple_is_summarised() -> None:
    """Past 16 items a tuple field prints as its length, first three items and last item."""
    # 17 embedding stages 0..16: length 17, items 0, 1, 2 and last 16
    topo = Topology(32, pp=32, embedding_stages=tuple(range(17)))
    assert repr(topo) == "Topology(32, pp=32, embedding_stages=<17 items: 0, 1, 2, …, 16>)"
    stages = (1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17, 18, 31)
    shifted = Topology(32, pp=32, embedding_stages=stages)
    assert "embedding_stages=<17 items: 1, 3, 4, …, 31>" in repr(shifted)


def test_repr_of_a_16_item_tuple_is_whole() -> None:
    """A tuple field of 16 items prints as the tuple."""
    topo = Topology(32, pp=32, embedding_stages=tuple(range(16)))
    assert repr(topo) == f"Topology(32, pp=32, embedding_stages={tuple(range(16))!r})"


def test_in_embedding_of_a_middle_stage_holds_every_chunk() -> None:
    """A middle stage in embedding_stages holds the embeddings in every virtual chunk.

    Megatron's is_rank_in_embedding_group checks the chunk only on the first and last stage
    and answers True for any other rank of the embedding group.
    """
    topo = Topology(4, pp=4, vpp=2, embedding_stages=(0, 1, 3))  # rank r is stage r
    assert [topo.in_embedding(r, v) for r in range(4) for v in (0, 1)] == [
        True,  # stage 0, chunk 0: the first chunk of the first stage
        False,  # stage 0, chunk 1
        True,  # stage 1 (middle, listed): any chunk
        True,
        False,  # stage 2: not an embedding stage
        False,
        False,  # stage 3, chunk 0
        True,  # stage 3, chunk 1: the last chunk of the last stage
    ]
    assert [topo.in_embedding(r) for r in range(4)] == [True, True, False, True]


def test_pipeline_refuses_a_stage_of_another_rank() -> None:
    """A Pipeline whose stage is a different rank's, or past the end, is refused by message."""
    message = r"^Pipeline stage 1 of ranks \(0, 4\) is not rank 0; give the rank's own stage"
    with pytest.raises(TopologyError, match=message):
        Pipeline(rank=0, stage=1, ranks=(0, 4), in_embedding=True, in_position_embedding=True)
    with pytest.raises(TopologyError, match=r"^Pipeline stage 2 of ranks \(0, 4\) is not rank 4"):
        Pipeline(rank=4, stage=2, ranks=(0, 4), in_embedding=True, in_position_embedding=False)


def test_virtual_layers_refuses_a_float_layer_count() -> None:
    """num_layers must be an int even when it divides evenly."""
    with pytest.raises(
        TopologyError, match=r"^num_layers must be a positive int, got 8\.0 \(float\)"
    ):
        virtual_layers(0, 8.0, pp=2, vpp=None)  # type: ignore[arg-type]


@settings(max_examples=BUDGET, deadline=None)
@given(topologies(max_world_size=48))
def test_shape_translates_are_the_groups(topo: Topology) -> None:
    """A kind's placement shape, base + X over its outer runs, lists exactly the kind's groups."""
    _check_shapes(topo)


@pytest.mark.parametrize(
    "topo",
    [
        Topology(8, pp=4, embedding_stages=(1, 3)),  # evenly spaced, not from stage 0
        Topology(16, pp=8, tp=2, embedding_stages=(1, 2, 6), position_embedding_stages=(2,)),
        Topology(12, pp=6, embedding_stages=(0, 2, 4), rank_offset=5),
    ],
)
def test_shapes_of_custom_embedding_stages(topo: Topology) -> None:
    """Embedding shapes of stages that skip stage 0 or are unevenly spaced list the groups."""
    _check_shapes(topo)


def _check_shapes(topo: Topology) -> None:
    """Every kind's shape (when it has one) translates to exactly the kind's groups."""
    for kind in topo.kinds:
        shape = shape_of(topo, kind)
        if shape is None:  # an irregular kind has no shape; placement enumerates it instead
            continue
        bases = [shape.offset + p for p in _points(shape.outer)]
        translated = sorted(tuple(shape.group(b)) for b in bases)
        assert translated == sorted(tuple(g) for g in topo.groups(kind)), kind
        for unit in (1, 2, 3, 4, 8):
            residues, complete = shape.residues(unit)
            assert complete
            assert set(residues) == {b % unit for b in bases}
            assert all(w in bases and w % unit == r for r, w in residues.items())


def test_order_without_dp_names_edp_too() -> None:
    """An order leaving out dp (of size 4 here) says dp or edp, and shows the fixed order."""
    message = (
        r"^order 'tp-pp' leaves out 'dp' but dp \(or edp\) is 4; add 'dp' to the order, "
        r"e\.g\. 'tp-pp-dp'$"
    )
    with pytest.raises(TopologyError, match=message):
        Topology(8, tp=2, order="tp-pp")


def test_etp_that_fits_no_ep_says_so() -> None:
    """When etp * pp does not divide the world no ep is valid, and the message says so."""
    # 8 % (3 * d * 1) != 0 for every divisor d of 8
    with pytest.raises(TopologyError, match=r"= 3; valid ep: none, change etp or pp$"):
        Topology(8, tp=2, etp=3)
