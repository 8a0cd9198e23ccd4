"""Golden layouts from the seed documents (``tests/data/seeds.json``, a copy of shared/golden).

Invariant of every ``layouts`` entry: ``Topology(world_size, order=order, **sizes)`` (dp derived,
ep = 1) has, for each listed kind, exactly the listed groups in the listed order. The documents'
errors are corrected in the file (see each entry's ``note``); ``fairscale-1024`` gives only
counts. ``hierarchical``: ``hierarchical_groups(ranks, sizes)`` equals ``levels``.
``embedding``: the pp group ``pp_ranks`` holds embeddings on its first and last ranks and position
embeddings on its first. ``pipeline_neighbours``: next/prev wrap around. ``virtual_pipeline``:
chunk layer lists, 1-based as in the document.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from topology import Topology, hierarchical_groups

DATA = json.loads((Path(__file__).parent / "data" / "seeds.json").read_text())
LAYOUTS = {entry["id"]: entry for entry in DATA["layouts"]}


def build(entry: dict[str, Any]) -> Topology:
    """The topology a golden layout describes."""
    sizes = {k: v for k, v in entry["sizes"].items() if k != "dp"}
    topo = Topology(entry["world_size"], order=entry["order"], **sizes)
    assert topo.dp == entry["sizes"]["dp"]
    return topo


def pp_topology(pp_ranks: list[int]) -> Topology:
    """A topology whose first pp group is ``pp_ranks`` (tp fills the stride, offset the start)."""
    pp = len(pp_ranks)
    stride = pp_ranks[1] - pp_ranks[0] if pp > 1 else 1
    topo = Topology(stride * pp, tp=stride, pp=pp, rank_offset=pp_ranks[0])
    assert topo.group_of(pp_ranks[0], "pp") == tuple(pp_ranks)
    return topo


@pytest.mark.parametrize("layout_id", [k for k, v in LAYOUTS.items() if v["groups"]])
def test_layout_groups(layout_id: str) -> None:
    """Each listed kind's groups equal the golden lists, in order."""
    entry = LAYOUTS[layout_id]
    topo = build(entry)
    for kind, groups in entry["groups"].items():
        assert [list(g) for g in topo.groups(kind)] == groups, kind


@pytest.mark.parametrize("layout_id", [k for k, v in LAYOUTS.items() if v["groups"]])
def test_layout_group_of(layout_id: str) -> None:
    """Every rank's group_of is the golden group that contains it."""
    entry = LAYOUTS[layout_id]
    topo = build(entry)
    for kind, groups in entry["groups"].items():
        for group in groups:
            for rank in group:
                assert list(topo.group_of(rank, kind)) == group, (kind, rank)


def test_fairscale_1024_counts() -> None:
    """fairscale 1024: 256 contiguous tp groups of 4, 128 pp groups of 8, 32 dp groups of 32."""
    topo = build(LAYOUTS["fairscale-1024"])
    tp, pp, dp = topo.groups("tp"), topo.groups("pp"), topo.groups("dp")
    assert (len(tp), len(pp), len(dp)) == (256, 128, 32)
    assert (len(tp[0]), len(pp[0]), len(dp[0])) == (4, 8, 32)
    assert all(g == tuple(range(g[0], g[0] + 4)) for g in tp)


def test_ml_starter_constructor() -> None:
    """Topology.ml_starter(8, 2, 2) is the ml-starter-8 layout."""
    entry = LAYOUTS["ml-starter-8"]
    topo = Topology.ml_starter(8, model_parallelism=2, pipeline_parallelism=2)
    assert topo == build(entry)
    for kind, groups in entry["groups"].items():
        assert [list(g) for g in topo.groups(kind)] == groups


def test_ml_starter_constructor_defaults() -> None:
    """Topology.ml_starter(4, 2) (pipeline parallelism left at 1) is the ml-starter-4 layout."""
    entry = LAYOUTS["ml-starter-4"]
    topo = Topology.ml_starter(4, 2)
    assert topo == build(entry)
    for kind, groups in entry["groups"].items():
        assert [list(g) for g in topo.groups(kind)] == groups
    assert Topology.ml_starter(4) == Topology(4, order="tp-pp-dp")


def test_ezpz_constructor_defaults() -> None:
    """Topology.ezpz(8, tp=2) (cp and pp left at 1) is the ezpz-8 layout."""
    entry = LAYOUTS["ezpz-8"]
    topo = Topology.ezpz(8, tp=2)
    assert topo == build(entry)
    for kind, groups in entry["groups"].items():
        assert [list(g) for g in topo.groups(kind)] == groups
    assert Topology.ezpz(4).tp == 1


def test_ezpz_constructor() -> None:
    """Topology.ezpz(16, tp=2, pp=2, cp=2) is the ezpz-16 layout."""
    entry = LAYOUTS["ezpz-16"]
    topo = Topology.ezpz(16, tp=2, pp=2, cp=2)
    assert topo == build(entry)
    for kind, groups in entry["groups"].items():
        assert [list(g) for g in topo.groups(kind)] == groups


@pytest.mark.parametrize("entry", DATA["hierarchical"], ids=lambda e: e["source"])
def test_hierarchical_groups(entry: dict[str, Any]) -> None:
    """hierarchical_groups(ranks, sizes) gives the golden levels."""
    levels = hierarchical_groups(entry["ranks"], entry["sizes"])
    assert [[list(g) for g in level] for level in levels] == entry["levels"]


def test_hierarchical_cp_kinds() -> None:
    """With cp = 16 and hcp_sizes [2, 2, 4], the hcp kinds are the golden levels."""
    entry = DATA["hierarchical"][0]
    topo = Topology(16, cp=16, hcp_sizes=entry["sizes"])
    for level, groups in enumerate(entry["levels"]):
        assert [list(g) for g in topo.groups(f"hcp-{level}")] == groups


@pytest.mark.parametrize("entry", DATA["embedding"], ids=lambda e: e["source"])
def test_embedding_ranks(entry: dict[str, Any]) -> None:
    """The pp group's embedding and position-embedding groups are the golden ranks."""
    topo = pp_topology(entry["pp_ranks"])
    first = entry["pp_ranks"][0]
    assert list(topo.group_of(first, "embedding")) == entry["embedding"]
    assert list(topo.group_of(first, "position-embedding")) == entry["position_embedding"]
    for rank in entry["pp_ranks"]:
        assert topo.pipeline(rank).in_embedding == (rank in entry["embedding"])
        assert topo.pipeline(rank).in_position_embedding == (rank in entry["position_embedding"])


@pytest.mark.parametrize("entry", DATA["pipeline_neighbours"], ids=lambda e: e["source"])
def test_pipeline_neighbours(entry: dict[str, Any]) -> None:
    """next and prev wrap around the pipeline as documented."""
    topo = pp_topology(entry["pp_ranks"])
    for rank in entry["pp_ranks"]:
        assert topo.pipeline(rank).next == entry["next"][str(rank)]
        assert topo.pipeline(rank).prev == entry["prev"][str(rank)]


@pytest.mark.parametrize("entry", DATA["virtual_pipeline"], ids=lambda e: e["source"])
def test_virtual_pipeline_layers(entry: dict[str, Any]) -> None:
    """layers(stage, num_layers) gives the documented chunks (the document counts from 1)."""
    topo = Topology(entry["tp"] * entry["pp"], tp=entry["tp"], pp=entry["pp"], vpp=entry["vpp"])
    for stage, chunks in entry["layers_1_based"].items():
        zero_based = [[layer - 1 for layer in chunk] for chunk in chunks]
        got = topo.layers(int(stage), entry["num_layers"])
        assert [list(chunk) for chunk in got] == zero_based, stage
