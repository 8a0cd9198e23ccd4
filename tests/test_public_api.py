"""The public names of ``topology`` are pinned: a change here is a deliberate API change."""

from __future__ import annotations

import topology
from topology import strategies

EXPECTED = [
    "Cluster",
    "DerivedGroups",
    "Finding",
    "Grid",
    "GroupList",
    "Kind",
    "OrthogonalGroups",
    "Pipeline",
    "Placement",
    "RankInfo",
    "Report",
    "Topology",
    "TopologyError",
    "check",
    "hierarchical_groups",
]


def test_all_is_pinned_and_sorted() -> None:
    """topology.__all__ is exactly the pinned list, sorted."""
    assert topology.__all__ == EXPECTED
    assert sorted(topology.__all__) == topology.__all__


def test_every_public_name_exists() -> None:
    """Every name in __all__ is importable from the package root."""
    for name in topology.__all__:
        assert getattr(topology, name) is not None


def test_strategies_module_exports() -> None:
    """topology.strategies exports grids, ranks and topologies."""
    assert strategies.__all__ == ["grids", "ranks", "topologies"]
