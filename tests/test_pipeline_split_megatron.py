"""Differential test: ``PipelineSplit.layers`` against megatron-core 0.19.2's own split.

A seeded list of cases (pp up to 8, vpp, 1 to 48 layers; nothing given, first / last stage
counts, embedding / loss accounting, layout strings; mostly valid, some not) goes to
``tests/megatron_split_oracle.py`` in one subprocess with the unpacked 0.19.2 wheel on
``PYTHONPATH``, which answers with ``get_transformer_layer_offset`` and
``get_num_layers_to_build`` for every (stage, chunk), or Megatron's error. Without the oracle
folder the test skips, except under ``CI`` where it fails.

Where Megatron accepts a split whose layers are not ``range(num_layers)`` cut into chunks
(counts past ``num_layers``), or one of :data:`OURS_TO_REFUSE`, we refuse; where it divides by
zero (pp 2 with vpp and both stage counts), we place the layers its counts say. All are
documented in ``topology._megatron.split.counts``.
"""

from __future__ import annotations

import random
from functools import cache
from typing import Any

from tests.megatron_runs import megatron_run
from topology import PipelineSplit, TopologyError

COUNT = 700

Case = dict[str, Any]

BRIDGE_PP16 = (
    [["embedding"] + ["decoder"] * 4] + [["decoder"] * 4] * 14 + [["decoder", "mtp", "loss"]]
)
"""Megatron-Bridge's DeepSeek-V3 pp 16 layout, in Megatron's list form (its recipe's)."""

OURS_TO_REFUSE = ("embedding first and the loss last", "both name the one stage of pp(1)")
"""What Megatron builds and we refuse: a layout's E or L off the first / last chunk (the transfer
keeps the embedding and output there), both stage counts at pp 1 (Megatron builds the last
count and ignores the first)."""


def _layout(rng: random.Random, num_layers: int, pp: int, chunks: int) -> str:
    """A layout string of ``num_layers`` t over ``pp * chunks`` chunks, written with repeats."""
    cuts = sorted(rng.choices(range(num_layers + 1), k=pp * chunks - 1))
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, num_layers], strict=True)]
    if rng.random() < 0.3:
        each, extra = divmod(num_layers, pp * chunks)
        sizes = [each] * (pp * chunks)
        sizes[-1] += extra
    body = [f"t*{n}" if n > 1 and rng.random() < 0.5 else "t" * n for n in sizes]
    body[0] = "E" + body[0]
    body[-1] += ("m" * rng.choice([0, 0, 1, 2])) + "L"
    text = "|".join(body)
    if len(set(sizes[1:-1])) == 1 and len(sizes) > 3 and rng.random() < 0.5:
        n = sizes[1]
        text = f"{body[0]}|({'t' * n}|)*{len(sizes) - 2}{body[-1]}"
    return text


def _case(rng: random.Random) -> Case:
    """One seeded case."""
    pp = rng.choice([1, 2, 2, 3, 4, 4, 5, 8])
    vpp = rng.choice([None, None, 2, 3]) if pp > 1 else None
    chunks = vpp or 1
    kind = rng.choice(
        ["even", "first", "last", "both", "both", "embedding", "accounting", "layout"]
    )
    case: Case = {"kind": kind, "pp": pp, "vpp": vpp}
    if kind == "even":
        layers = rng.choice([pp * chunks * rng.randint(1, 4), rng.randint(1, 48)])
    elif kind in ("first", "last", "both"):
        first = chunks * rng.randint(1, 4) if kind != "last" else None
        last = chunks * rng.randint(1, 4) if kind != "first" else None
        middle = max(pp - (first is not None) - (last is not None), 0)
        layers = (first or 0) + (last or 0) + middle * chunks * rng.randint(0 if pp < 3 else 1, 4)
        if rng.random() < 0.25:
            layers = max(1, layers + rng.choice([-3, -1, 1, 2]))
        if rng.random() < 0.1 and first is not None:
            first += 1
        case["num_layers_in_first_pipeline_stage"] = first
        case["num_layers_in_last_pipeline_stage"] = last
    elif kind in ("embedding", "accounting"):
        loss = kind == "accounting" or rng.random() < 0.3
        embedding = kind == "accounting" or not loss
        layers = pp * chunks * rng.randint(1, 4) - embedding - loss
        if rng.random() < 0.2 or layers < 1:
            layers = rng.randint(1, 40)
        case["account_for_embedding_in_pipeline_split"] = embedding
        case["account_for_loss_in_pipeline_split"] = loss
    else:
        layers = rng.randint(1, 40)
        case["pipeline_model_parallel_layout"] = _layout(rng, layers, pp, chunks)
        if rng.random() < 0.1:
            layers += 1
    return {"num_layers": max(layers, 1), **case}


def _cases() -> list[Case]:
    rng = random.Random(24)
    cases = [_case(rng) for _ in range(COUNT)]
    # The recipes of the README, and corners.
    cases += [
        {"num_layers": 61, "pp": 16, "vpp": None, "num_layers_in_first_pipeline_stage": 3}
        | {"num_layers_in_last_pipeline_stage": 2},
        {"num_layers": 61, "pp": 16, "vpp": None}
        | {"pipeline_model_parallel_layout": "Et*4|(t*4|)*14,tmL"},
        {"num_layers": 61, "pp": 8, "vpp": 2}
        | {"pipeline_model_parallel_layout": "Et*4|(t*4|)*14,tmL"},
        {"num_layers": 5, "pp": 1, "vpp": None, "num_layers_in_first_pipeline_stage": 2}
        | {"num_layers_in_last_pipeline_stage": 1},
        {"num_layers": 4, "pp": 3, "vpp": None, "num_layers_in_first_pipeline_stage": 3}
        | {"num_layers_in_last_pipeline_stage": 3},
        {"num_layers": 61, "pp": 16, "vpp": None, "pipeline_model_parallel_layout": BRIDGE_PP16},
        {"num_layers": 4, "pp": 2, "vpp": None, "pipeline_model_parallel_layout": "|EttttL"},
        {"num_layers": 2, "pp": 3, "vpp": None, "pipeline_model_parallel_layout": "Et|*2tL"},
        {"num_layers": 2, "pp": 3, "vpp": None, "pipeline_model_parallel_layout": "E(t|)*2,t*0L"},
        {"num_layers": 6, "pp": 2, "vpp": None, "pipeline_model_parallel_layout": "E(t*2)*2|ttL"},
        {"num_layers": 2, "pp": 2, "vpp": None, "pipeline_model_parallel_layout": "Et|(t)L"},
        {"num_layers": 4, "pp": 2, "vpp": None, "pipeline_model_parallel_layout": "Ett|ttmLm"},
        {"num_layers": 4, "pp": 2, "vpp": None, "pipeline_model_parallel_layout": "Etmt|ttL"},
    ]
    return cases


@cache
def _oracle() -> tuple[list[Case], list[dict[str, Any]]]:
    """The cases and what megatron-core 0.19.2 makes of each (one subprocess)."""
    cases = _cases()
    found = megatron_run(
        "the pipeline split differential test",
        "megatron_split_oracle.py",
        cases,
        needs="megatron/core/transformer/transformer_layer.py",
    )
    return cases, found


def _ours(case: Case) -> tuple[tuple[tuple[int, ...], ...], ...]:
    split = PipelineSplit.from_megatron(case)
    return split.layers(case["num_layers"], case["pp"], case["vpp"])


def _theirs(answer: dict[str, Any]) -> tuple[tuple[tuple[int, ...], ...], ...]:
    return tuple(
        tuple(tuple(range(offset, offset + count)) for offset, count in stage)
        for stage in answer["layers"]
    )


def _partition(layers: tuple[tuple[tuple[int, ...], ...], ...], num_layers: int) -> bool:
    """True if the chunks, in Megatron's order, cut ``range(num_layers)`` with no count < 0."""
    chunks = len(layers[0])
    ordered = [i for v in range(chunks) for stage in layers for i in stage[v]]
    return ordered == list(range(num_layers))


def test_the_seeded_cases_cover_what_they_should() -> None:
    """Every kind of split is accepted often and refused sometimes."""
    cases, answers = _oracle()
    kinds: dict[str, list[bool]] = {}
    for case, answer in zip(cases, answers, strict=True):
        kinds.setdefault(case.get("kind", "corner"), []).append("layers" in answer)
    assert len(kinds) == 8
    for kind, accepted in kinds.items():
        if kind != "corner":
            assert sum(accepted) >= 50 and len(accepted) - sum(accepted) >= 5, kind


def test_every_split_megatron_builds_is_ours() -> None:
    """Same layers on every (stage, chunk) wherever Megatron's layers cut range(num_layers)."""
    cases, answers = _oracle()
    differ = []
    for case, answer in zip(cases, answers, strict=True):
        if "layers" in answer and _partition(_theirs(answer), case["num_layers"]):
            try:
                ours: object = _ours(case)
            except TopologyError as error:
                if any(why in str(error) for why in OURS_TO_REFUSE):
                    continue  # the last test
                ours = str(error)
            if ours != _theirs(answer):
                differ.append((case, ours, _theirs(answer)))
    assert differ == []


def test_splits_megatron_refuses_or_builds_wrongly_are_refused() -> None:
    """A split Megatron refuses, or builds with layers missing, doubled or negative, raises here
    (a layout needs its embedding first and its loss last, too); except Megatron's division by
    zero at pp 2 with vpp and both stage counts, where we follow its counts."""
    cases, answers = _oracle()
    accepted_by_us = []
    for case, answer in zip(cases, answers, strict=True):
        if "layers" in answer and _partition(_theirs(answer), case["num_layers"]):
            continue
        try:
            ours = _ours(case)
        except TopologyError:
            continue
        zero = "ZeroDivisionError" in answer.get("error", "")
        if zero and case["pp"] == 2 and case["vpp"] and _partition(ours, case["num_layers"]):
            continue
        accepted_by_us.append((case, answer))
    assert accepted_by_us == []


def test_the_splits_megatron_builds_and_we_refuse_are_the_documented_ones() -> None:
    """A layout whose E or L is off the first / last chunk, both stage counts at pp 1."""
    cases, answers = _oracle()
    refused = []
    for case, answer in zip(cases, answers, strict=True):
        if "layers" in answer and _partition(_theirs(answer), case["num_layers"]):
            try:
                _ours(case)
            except TopologyError as error:
                refused.append(str(error))
    assert {why for why in OURS_TO_REFUSE if any(why in e for e in refused)} == set(OURS_TO_REFUSE)
    assert all(any(why in e for why in OURS_TO_REFUSE) for e in refused)
