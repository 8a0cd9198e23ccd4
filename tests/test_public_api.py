"""The public names of ``topology`` are pinned: a change here is a deliberate API change."""

from __future__ import annotations

import topology
from topology import strategies

EXPECTED = [
    "Allocation",
    "Architecture",
    "Arrangement",
    "AxisGroups",
    "Bridge",
    "Cluster",
    "Creation",
    "Crossings",
    "EngineLayout",
    "Finding",
    "Grid",
    "GroupList",
    "Growth",
    "HFWeight",
    "Handoff",
    "Host",
    "Kind",
    "Landing",
    "Location",
    "Module",
    "Modules",
    "ModulesArrangement",
    "ModulesReport",
    "Param",
    "ParamPlacement",
    "ParamShard",
    "Pipeline",
    "PipelineSplit",
    "Placement",
    "Pull",
    "RankInfo",
    "RankMap",
    "RankRefit",
    "RankTransfer",
    "Refit",
    "Report",
    "Reshape",
    "Tier",
    "Topology",
    "TopologyError",
    "Transfer",
    "TransferOp",
    "TransferTime",
    "bridge",
    "check",
    "check_modules",
    "compress_hostlist",
    "crossings",
    "expand_hostlist",
    "grow",
    "hf_weights",
    "hierarchical_groups",
    "hybrid_cp_groups",
    "mimo_layout",
    "param_placement",
    "place",
    "place_modules",
    "read_allocation",
    "read_hostfile",
    "read_model_config",
    "read_slurm_topology",
    "read_topograph",
    "refit",
    "refit_rank",
    "reshape",
    "transfer",
    "transfer_rank",
    "transfer_time",
    "weights",
]


def test_all_is_pinned_and_sorted() -> None:
    """topology.__all__ is exactly the pinned list, sorted."""
    assert topology.__all__ == EXPECTED
    assert sorted(topology.__all__) == topology.__all__


def test_group_sequence_classes_stay_importable() -> None:
    """The two implementations left __all__ for GroupList but old imports keep working."""
    from topology import DerivedGroups, GroupList, OrthogonalGroups

    assert issubclass(OrthogonalGroups, GroupList) and issubclass(DerivedGroups, GroupList)
    assert isinstance(topology.Topology(8, tp=2).groups("tp"), GroupList)
    assert isinstance(topology.Topology(8, pp=2).groups("embedding"), GroupList)


def test_every_public_name_exists() -> None:
    """Every name in __all__ is importable from the package root."""
    for name in topology.__all__:
        assert getattr(topology, name) is not None


def test_strategies_module_exports() -> None:
    """topology.strategies exports grids, modules, ranks and topologies."""
    assert strategies.__all__ == ["grids", "modules", "ranks", "topologies"]
