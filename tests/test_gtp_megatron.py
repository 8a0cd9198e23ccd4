"""Differential test: the GTP kinds against megatron-core 0.19.2's ``initialize_model_parallel``.

A seeded list of layouts with ``gtp`` and/or ``egtp`` > 1 (world up to 256, with cp, ep, etp != tp,
pp, several orders, and some that Megatron refuses) goes to ``tests/megatron_gtp_oracle.py`` in one
subprocess with the unpacked 0.19.2 wheel on ``PYTHONPATH`` (``scripts/setup.sh`` unpacks it).
Every group Megatron creates must be a group of the same kind here, in the same order, and the
kinds must come in Megatron's creation order; every layout Megatron refuses is refused here.
Without the oracle folder the test skips, except under ``CI`` where it fails.
"""

from __future__ import annotations

import random
from functools import cache
from typing import Any

from tests.megatron_runs import megatron_run
from topology import Topology, TopologyError

# Megatron's group_desc of each group it creates, and our kind of the same groups.
KIND_OF_DESC = {
    "GTP_WEIGHT_REMAT_GROUP": "gtp",
    "DATA_PARALLEL_GROUP_WITH_CP": "dp-cp",
    "INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP": "intra-dp-cp",
    "DATA_PARALLEL_GROUP": "dp",
    "DATA_PARALLEL_GROUP_WITH_GTP_REMAT": "gtp-dp",
    "DATA_PARALLEL_GROUP_WITH_CP_WITH_GTP_REMAT": "gtp-dp-cp",
    "CONTEXT_PARALLEL_GROUP": "cp",
    "MODEL_PARALLEL_GROUP": "tp-pp",
    "TENSOR_MODEL_PARALLEL_GROUP": "tp",
    "PIPELINE_MODEL_PARALLEL_GROUP": "pp",
    "EMBEDDING_GROUP": "embedding",
    "POSITION_EMBEDDING_GROUP": "position-embedding",
    "TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP": "tp-dp-cp",
    "TENSOR_AND_DATA_PARALLEL_GROUP": "tp-dp",
    "TENSOR_AND_CONTEXT_PARALLEL_GROUP": "tp-cp",
    "EXPERT_GTP_WEIGHT_REMAT_GROUP": "egtp",
    "EXPERT_MODEL_PARALLEL_GROUP": "ep",
    "EXPERT_TENSOR_PARALLEL_GROUP": "etp",
    "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP": "etp-ep",
    "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP": "etp-ep-pp",
    "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP_WITH_EGTP": "etp-ep-egtp-pp",
    "EXPERT_DATA_PARALLEL_GROUP": "edp",
    "EXPERT_DATA_PARALLEL_GROUP_WITH_GTP_REMAT": "egtp-edp",
    "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP": "intra-dist-opt",
}

# Megatron makes these with singleton (or duplicate) groups at GTP size 1, and the
# distributed-optimizer instance group always; here they exist only when they split something.
ONLY_WHEN = {
    "gtp": lambda t: t.gtp > 1,
    "egtp": lambda t: t.egtp > 1,
    "etp-ep-egtp-pp": lambda t: t.egtp > 1,
    "intra-dist-opt": lambda t: t.dist_opt_instances > 1,
}

ORDERS = (
    "tp-cp-ep-dp-pp",
    "tp-cp-ep-pp-dp",
    "tp-pp-dp",
    "tp-dp-pp",
    "tp-cp-pp-dp",
    "tp-ep-cp-dp-pp",
    "cp-tp-ep-dp-pp",
    "ep-tp-cp-dp-pp",
    "tp-gtp_remat-cp-ep-dp-pp",
    "tp-cp-ep-gtp_remat-dp-pp",
    "gtp_remat-tp-cp-ep-dp-pp",
    "dp-pp",
)

COUNT = 600


def _layouts(count: int) -> list[dict[str, Any]]:
    """``count`` seeded layouts with gtp or egtp > 1, mostly valid, some not."""
    rng = random.Random(21)
    layouts: list[dict[str, Any]] = []
    while len(layouts) < count:
        tp, gtp, cp, pp, dp = (
            rng.choice(c) for c in ([1, 2, 4], [1, 2, 4], [1, 2], [1, 2, 4], [1, 2, 4])
        )
        world = tp * gtp * cp * pp * dp
        egtp = rng.choice([1, 2, 4])
        if world > 256 or gtp == egtp == 1:
            continue
        etp = rng.choice([tp, tp, 1, 2])
        ep = rng.choice([1, 1, 2, 4])
        order = (
            rng.choice(ORDERS)
            if rng.random() < 0.8
            else "-".join(rng.sample(["tp", "cp", "ep", "dp", "pp"], 5))
        )
        if "tp" not in order.split("-") and max(tp, etp) > 1:
            continue  # Megatron finds 'tp' inside 'gtp_remat' and builds wrong groups
        instances = 2 if rng.random() < 0.05 else 1
        if rng.random() < 0.05:
            world = world * 3 // 2 if world % 2 == 0 else world + 1
        layouts.append(
            {
                "world_size": world,
                "tp": tp,
                "pp": pp,
                "cp": cp,
                "ep": ep,
                "etp": etp,
                "gtp": gtp,
                "egtp": egtp,
                "dist_opt_instances": instances,
                "order": order,
            }
        )
    return layouts


@cache
def _oracle() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The layouts and what megatron-core 0.19.2 makes of each (one subprocess)."""
    layouts = _layouts(COUNT)
    return layouts, megatron_run("the GTP differential test", "megatron_gtp_oracle.py", layouts)


def _ours(layout: dict[str, Any]) -> Topology:
    return Topology(**layout)


def test_the_seeded_layouts_cover_what_they_should() -> None:
    """Most layouts are valid for Megatron, some are not, and every one has gtp or egtp > 1."""
    layouts, answers = _oracle()
    accepted = [
        layout for layout, answer in zip(layouts, answers, strict=True) if "groups" in answer
    ]
    assert len(accepted) >= 250
    assert len(layouts) - len(accepted) >= 20
    assert all(layout["gtp"] > 1 or layout["egtp"] > 1 for layout in layouts)
    assert any(layout["gtp"] > 1 and layout["egtp"] > 1 and layout["cp"] > 1 for layout in accepted)
    assert any(layout["etp"] != layout["tp"] and layout["ep"] > 1 for layout in accepted)


def _only_size_one_after_pp(topo: Topology, order: str) -> bool:
    """True if every axis the given order names after pp has size 1 in both grids."""
    tokens = order.split("-")
    after = tokens[tokens.index("pp") + 1 :] if "pp" in tokens else []
    sizes = {"tp": max(topo.tp, topo.etp), "cp": topo.cp, "ep": topo.ep}
    sizes |= {"dp": max(topo.dp, topo.edp), "gtp_remat": max(topo.gtp, topo.egtp)}
    return all(sizes[t] == 1 for t in after)


def test_layouts_megatron_refuses_are_refused() -> None:
    """Every layout 0.19.2 refuses raises TopologyError here, except one documented spelling:
    Megatron wants the order string to end with pp, we want only size-1 axes after pp (the same
    groups as with pp last, which Megatron accepts)."""
    layouts, answers = _oracle()
    accepted_by_us = []
    for layout, answer in zip(layouts, answers, strict=True):
        if "error" not in answer:
            continue
        try:
            topo = _ours(layout)
        except TopologyError:
            continue
        if "pp-last rank ordering" in answer["error"] and _only_size_one_after_pp(
            topo, layout["order"]
        ):
            continue
        accepted_by_us.append((layout, answer["error"]))
    assert accepted_by_us == []


def test_every_group_megatron_creates_is_ours() -> None:
    """Same kinds, same groups in the same order, kinds in Megatron's creation order."""
    layouts, answers = _oracle()
    differ = []
    for layout, answer in zip(layouts, answers, strict=True):
        if "groups" not in answer:
            continue
        topo = _ours(layout)
        theirs: dict[str, list[tuple[int, ...]]] = {}
        for desc, ranks in answer["groups"]:
            kind = KIND_OF_DESC[desc]
            if kind in ONLY_WHEN and not ONLY_WHEN[kind](topo):
                continue
            theirs.setdefault(kind, []).append(tuple(ranks))
        if tuple(theirs) != topo.kinds:
            differ.append((layout, "kinds", tuple(theirs), topo.kinds))
            continue
        for kind, groups in theirs.items():
            if list(topo.groups(kind)) != groups:
                differ.append((layout, kind, groups[:4], list(topo.groups(kind))[:4]))
    assert differ == []
