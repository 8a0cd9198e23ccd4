"""``PipelineSplit``: Megatron's pipeline split of the decoder layers, and its refusals.

Laws first (every accepted split cuts ``range(num_layers)`` in Megatron's chunk order; the even
split is ``Topology.layers``'s), then golden tables (the DeepSeek-V3 recipes), then every
refusal with its message. ``tests/test_pipeline_split_megatron.py`` compares with Megatron.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import PipelineSplit, Topology, TopologyError

Layers = tuple[tuple[tuple[int, ...], ...], ...]


def _in_megatron_order(layers: Layers) -> list[int]:
    """Every layer, chunk 0 of every stage first, then chunk 1, ..."""
    return [i for v in range(len(layers[0])) for stage in layers for i in stage[v]]


@st.composite
def _splits(draw: st.DrawFn) -> tuple[PipelineSplit, int, int, int | None]:
    """A split, num_layers, pp and vpp, valid or not."""
    pp = draw(st.integers(1, 6))
    vpp = draw(st.sampled_from([None, 2, 3])) if pp > 1 else None
    layers = draw(st.integers(1, 40))
    kind = draw(st.sampled_from(["even", "counts", "accounting", "layout"]))
    if kind == "counts":
        first = draw(st.none() | st.integers(1, 8))
        last = draw(st.none() | st.integers(1, 8)) if first is not None else draw(st.integers(1, 8))
        split = PipelineSplit(first_stage_layers=first, last_stage_layers=last)
    elif kind == "accounting":
        embedding = draw(st.booleans())
        split = PipelineSplit(account_for_embedding=embedding, account_for_loss=not embedding)
    elif kind == "layout":
        count = pp * (vpp or 1)
        body = ["t" * n for n in draw(st.lists(st.integers(0, 4), min_size=count, max_size=count))]
        body[0], body[-1] = "E" + body[0], body[-1] + "L"
        split = PipelineSplit(layout="|".join(body))
        layers = "".join(body).count("t") or layers if draw(st.booleans()) else layers
    else:
        split = PipelineSplit()
    return split, layers, pp, vpp


@settings(max_examples=150, deadline=None)
@given(_splits())
def test_an_accepted_split_cuts_the_layers_in_megatron_chunk_order(
    case: tuple[PipelineSplit, int, int, int | None],
) -> None:
    """Chunk v of stage p is model chunk v * pp + p; the chunks in that order are range(L)."""
    split, num_layers, pp, vpp = case
    try:
        layers = split.layers(num_layers, pp, vpp)
    except TopologyError:
        return
    assert len(layers) == pp and all(len(stage) == (vpp or 1) for stage in layers)
    assert _in_megatron_order(layers) == list(range(num_layers))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.sampled_from([None, 2, 3]), st.integers(1, 5))
def test_the_even_split_is_topology_layers(pp: int, vpp: int | None, each: int) -> None:
    """PipelineSplit() gives what Topology.layers gives without a split, stage by stage."""
    vpp = vpp if pp > 1 else None
    topo = Topology(pp, pp=pp, vpp=vpp)
    num_layers = pp * (vpp or 1) * each
    even = PipelineSplit().layers(num_layers, pp, vpp)
    assert even == tuple(topo.layers(s, num_layers) for s in range(pp))
    assert even == tuple(topo.layers(s, num_layers, PipelineSplit()) for s in range(pp))


def test_deepseek_v3_recipes_at_pp_16() -> None:
    """NeMo-RL's (first 3, last 2) and Megatron-Bridge's layout (Et*4|(t*4|)*14,tmL)."""
    nemo_rl = PipelineSplit(first_stage_layers=3, last_stage_layers=2).layers(61, 16)
    assert [len(s[0]) for s in nemo_rl] == [3] + [4] * 14 + [2]
    assert nemo_rl[1] == ((3, 4, 5, 6),) and nemo_rl[15] == ((59, 60),)
    bridge = PipelineSplit(layout="Et*4|(t*4|)*14,tmL").layers(61, 16)
    assert [len(s[0]) for s in bridge] == [4] * 15 + [1]
    assert bridge[15] == ((60,),)


def test_interleaved_golden() -> None:
    """Stage counts over vpp 2: each stage's count is halved over its two chunks."""
    split = PipelineSplit(first_stage_layers=2, last_stage_layers=4)
    assert split.layers(10, pp=3, vpp=2) == (
        ((0,), (5,)),
        ((1, 2), (6, 7)),
        ((3, 4), (8, 9)),
    )
    accounting = PipelineSplit(account_for_embedding=True, account_for_loss=True)
    assert accounting.layers(6, pp=2, vpp=2) == (((0,), (3, 4)), ((1, 2), (5,)))


def test_megatron_names_round_trip() -> None:
    """from_megatron reads what to_megatron writes, and ignores the config's other keys."""
    split = PipelineSplit(layout="Et|tL")
    assert (
        PipelineSplit.from_megatron({**split.to_megatron(), "tensor_model_parallel_size": 8})
        == split
    )
    assert (
        PipelineSplit.from_megatron({"account_for_loss_in_pipeline_split": None}) == PipelineSplit()
    )


def test_megatron_list_layouts_become_strings() -> None:
    """Megatron's list form (Megatron-Bridge's recipes) reads as the string form."""
    rows = [["embedding", "decoder"], ["Decoder ", "mtp", "loss"]]
    split = PipelineSplit.from_megatron({"pipeline_model_parallel_layout": rows})
    assert split == PipelineSplit(layout="Et|tmL")
    for bad, match in (
        ([], r"pipeline layout list must be a non-empty list of lists of layer names, got \[\]"),
        (["Et"], r"pipeline layout list row 'Et' is not a list of layer names"),
        ([["embedding", "encoder"]], r"pipeline layout list names the layer 'encoder'; use"),
    ):
        with pytest.raises(TopologyError, match=match):
            PipelineSplit.from_megatron({"pipeline_model_parallel_layout": bad})


def test_str_and_repr() -> None:
    """str is a short phrase; repr shows only what was given."""
    assert str(PipelineSplit()) == "even"
    assert str(PipelineSplit(first_stage_layers=3, last_stage_layers=2)) == "first 3, last 2"
    assert str(PipelineSplit(account_for_embedding=True)) == "embedding"
    assert str(PipelineSplit(layout="Et|tL")) == "layout 'Et|tL'"
    assert repr(PipelineSplit(last_stage_layers=2)) == "PipelineSplit(last_stage_layers=2)"


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (
            lambda: PipelineSplit(first_stage_layers=0),
            r"first_stage_layers must be a positive int, got 0 \(int\)",
        ),
        (
            lambda: PipelineSplit(account_for_loss=1),  # type: ignore[arg-type]
            r"account_for_loss must be True or False, got 1 \(int\); give a bool",
        ),
        (
            lambda: PipelineSplit(last_stage_layers=2, account_for_embedding=True),
            r"cannot be given together \(Megatron refuses it\); give stage layer counts or "
            r"accounting, not both",
        ),
        (
            lambda: PipelineSplit(layout="Et|tL", first_stage_layers=1),
            r"layout 'Et\|tL' cannot be given with stage layer counts or accounting \(Megatron "
            r"refuses it\); give the layout alone",
        ),
        (lambda: PipelineSplit(layout=""), r"pipeline layout must be a non-empty string"),
        (
            lambda: PipelineSplit(layout="Ex|tL"),
            r"pipeline layout 'Ex\|tL' has the character 'x'; use E \(embedding\)",
        ),
        (
            lambda: PipelineSplit(layout="E(t|L"),
            r"has an unclosed, nested or empty group; write \(...\)\*n",
        ),
        (lambda: PipelineSplit(layout="E(t)|L"), r"has a group without a count; write \(...\)\*n"),
        (lambda: PipelineSplit(layout="Et)|L"), r"closes a group it never opened"),
        (lambda: PipelineSplit(layout="Et*9999999|L"), r"unrolls to more than \d+ letters"),
        (
            lambda: PipelineSplit.from_megatron([1]),  # type: ignore[arg-type]
            r"config must be a mapping of Megatron's config fields, got \[1\]",
        ),
        (
            lambda: Topology(4, pp=2).layers(0, 3, split=3),  # type: ignore[arg-type]
            r"split must be a PipelineSplit or None, got 3 \(int\)",
        ),
        (
            lambda: Topology(4, pp=2).layers(2, 3, PipelineSplit()),
            r"stage 2 is out of range; valid stages: 0 to 1",
        ),
    ],
)
def test_bad_options_are_refused(make: object, match: str) -> None:
    """Each bad option raises TopologyError naming the value and the fix."""
    with pytest.raises(TopologyError, match=match):
        make()  # type: ignore[operator]


@pytest.mark.parametrize(
    ("split", "args", "match"),
    [
        (
            PipelineSplit(),
            (61, 16, None),
            r"num_layers 61 is not divisible by pp\(16\) \(Megatron's even split\); give "
            r"first_stage_layers / last_stage_layers or a layout",
        ),
        (
            PipelineSplit(),
            (12, 2, 4),
            r"num_layers 12 over pp\(2\) is 6 layers per stage, not divisible by vpp\(4\)",
        ),
        (
            PipelineSplit(account_for_embedding=True, account_for_loss=True),
            (61, 16, None),
            r"num_layers 61 \+ 1 \(embedding\) \+ 1 \(loss\) = 63 is not divisible by pp\(16\)",
        ),
        (
            PipelineSplit(first_stage_layers=3),
            (61, 16, 2),
            r"first_stage_layers 3 is not divisible by vpp\(2\), the stage's chunks; give a "
            r"multiple of 2",
        ),
        (
            PipelineSplit(first_stage_layers=3, last_stage_layers=2),
            (62, 16, None),
            r"leave 57 of num_layers 62 layers for 14 middle stages of pp\(16\), not an even split",
        ),
        (
            PipelineSplit(first_stage_layers=40, last_stage_layers=30),
            (61, 16, None),
            r"place 70 layers, more than num_layers 61; give counts that sum to at most 61",
        ),
        (
            PipelineSplit(first_stage_layers=3, last_stage_layers=2),
            (6, 2, None),
            r"leave 1 of num_layers 6 layers and no middle stage of pp\(2\); give counts that sum "
            r"to 6",
        ),
        (
            PipelineSplit(first_stage_layers=2, last_stage_layers=2),
            (4, 1, None),
            r"both name the one stage of pp\(1\); give only first_stage_layers=4, or none",
        ),
        (
            PipelineSplit(first_stage_layers=2),
            (8, 3, 2),
            r"leave 6 layers over 2 middle stages, 3 each, not divisible by vpp\(2\)",
        ),
        (
            PipelineSplit(layout="Et|tL"),
            (2, 1, None),
            r"has 2 chunks, not pp\(1\) \* vpp\(1\) = 1; give vpp=2",
        ),
        (
            PipelineSplit(layout="Et|t|tL"),
            (3, 2, None),
            r"has 3 chunks, not pp\(2\) \* vpp\(1\) = 2; give 2 chunks separated by \|",
        ),
        (
            PipelineSplit(layout="Et|EtL"),
            (2, 2, None),
            r"has 2 E and 1 L; give one embedding E and one loss L",
        ),
        (
            PipelineSplit(layout="tE|tL"),
            (2, 2, None),
            r"does not start with E in the first chunk and end with L in the last",
        ),
        (
            PipelineSplit(layout="Et|tL"),
            (3, 2, None),
            r"has 2 decoder layers \(t\), not num_layers 3; give 3 t",
        ),
        (
            PipelineSplit(layout="Etm|tL"),
            (2, 2, None),
            r"has a decoder layer after an MTP layer; put m after t",
        ),
        (
            PipelineSplit(layout="Et|tm||L"),
            (2, 2, 2),
            r"has MTP layers \(m\) in chunks \[1\] of pp\(2\) \* vpp\(2\); put every m in one "
            r"stage's last virtual chunk",
        ),
        (
            PipelineSplit(),
            (0, 2, None),
            r"num_layers must be a positive int, got 0 \(int\)",
        ),
        (PipelineSplit(), (4, 1, 2), r"vpp\(2\) needs pipeline stages to interleave, but pp is 1"),
    ],
)
def test_splits_megatron_refuses_are_refused(
    split: PipelineSplit, args: tuple[int, int, int | None], match: str
) -> None:
    """Each refusal names the values, shows the arithmetic and ends with the fix."""
    with pytest.raises(TopologyError, match=match):
        split.layers(*args)
