"""``process_group_collection()`` against Megatron's own ``ProcessGroupCollection``.

Differential: on one spawned gloo world (4 ranks) per megatron-core version, every rank runs each
layout twice, with Megatron's ``initialize_model_parallel`` + ``ProcessGroupCollection
.use_mpu_process_groups()`` and with our façade + ``process_group_collection()``, and records
every field's ranks (None where the field is None); the parent compares the records field for
field. 0.19.2 (27 fields, GTP layouts) is its oracle folder, first on each rank's path; 0.16.1
(20 fields) is the one installed in .venv.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import types
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch.distributed")

import torch.distributed as dist

from tests.torch.oracle import oracle_0_19
from tests.torch.world import run_world

if importlib.util.find_spec("megatron.core") is None:  # cheap: spawned ranks import this module
    pytest.skip("megatron-core is not installed", allow_module_level=True)

# 4 ranks: GTP beside tp, GTP beside pp (embedding groups), GTP on the expert grid only, and no
# GTP with cp, ep and two distributed-optimizer instances, the all-gather communicators asked for.
LAYOUTS_0_19: list[dict[str, Any]] = [
    {"tensor_model_parallel_size": 2, "gtp_remat_size": 2},
    {"pipeline_model_parallel_size": 2, "gtp_remat_size": 2},
    {"expert_model_parallel_size": 2, "expert_gtp_remat_size": 2},
    {
        "context_parallel_size": 2,
        "expert_model_parallel_size": 2,
        "num_distributed_optimizer_instances": 2,
        "all_gather": True,
    },
]

# 4 ranks: pipeline stages (embedding groups); ep with two instances; hierarchical cp, last:
# 0.16.1's destroy_model_parallel leaves its hcp groups behind for the next layout.
LAYOUTS_0_16: list[dict[str, Any]] = [
    {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2},
    {
        "context_parallel_size": 2,
        "expert_model_parallel_size": 2,
        "num_distributed_optimizer_instances": 2,
    },
    {"context_parallel_size": 4, "hierarchical_context_parallel_sizes": [2, 2]},
]
WORLD = 4


def _bare_megatron(oracle: str | None) -> None:
    """Load megatron.core's modules from ``oracle`` (else the installed megatron-core) without
    its package ``__init__`` (0.16.1's imports its whole training stack: seconds per rank); the
    modules themselves are Megatron's."""
    if oracle is not None:
        sys.path.insert(0, oracle)
        roots = [os.path.join(oracle, "megatron")]
    else:
        found = importlib.util.find_spec("megatron")
        roots = list(found.submodule_search_locations or []) if found else []
    package = types.ModuleType("megatron")
    package.__path__ = roots
    core = types.ModuleType("megatron.core")
    core.__path__ = [os.path.join(root, "core") for root in roots]
    package.core = core  # type: ignore[attr-defined]
    sys.modules.update({"megatron": package, "megatron.core": core})


def _ranks(value: Any) -> Any:
    """A field's ranks: None, a list of ranks, or a list of them (``hcp``)."""
    if value is None:
        return None
    if isinstance(value, list):
        return [dist.get_process_group_ranks(g) for g in value]
    return dist.get_process_group_ranks(value)


def _record(collection: Any) -> dict[str, Any]:
    return {name: _ranks(value) for name, value in sorted(vars(collection).items())}


def _megatron(layout: dict[str, Any]) -> dict[str, Any]:
    """Megatron's own collection after its own initialize_model_parallel."""
    from megatron.core import parallel_state
    from megatron.core.process_groups_config import ProcessGroupCollection

    kwargs = {k: v for k, v in layout.items() if k != "all_gather"}
    parallel_state.initialize_model_parallel(**kwargs, create_gloo_process_groups=False)
    collection = ProcessGroupCollection.use_mpu_process_groups()
    if layout.get("all_gather"):  # as megatron/training/training.py's get_model does
        ep = layout.get("expert_model_parallel_size", 1)
        dense, expert = parallel_state.create_all_gather_groups(for_expert_parallelism=ep > 1)
        collection.dp_cp_ag, collection.expt_dp_ag = dense, expert
    record = _record(collection)
    parallel_state.destroy_model_parallel()
    return record


def _ours(layout: dict[str, Any]) -> dict[str, Any]:
    """Our façade's collection; the all-gather fields are new communicators."""
    from topology_torch.compat import megatron

    kwargs = {k: v for k, v in layout.items() if k != "all_gather"}
    megatron.initialize_model_parallel(**kwargs, create_gloo_process_groups=False)
    collection = megatron.process_group_collection(all_gather=bool(layout.get("all_gather")))
    if layout.get("all_gather"):
        assert collection.dp_cp_ag is not collection.dp_cp
        assert collection.expt_dp_ag is not collection.expt_dp
        assert megatron.process_group_collection().dp_cp_ag is collection.dp_cp_ag  # kept
    record = _record(collection)
    megatron.destroy_model_parallel()
    return record


def _own_second_communicators() -> None:
    """Groups made with ``independent=`` fill the all-gather fields (where the class has them)."""
    from topology import Topology
    from topology_torch import ProcessGroups
    from topology_torch.compat.megatron import process_group_collection

    kinds = ("dp-cp", "edp")
    with ProcessGroups.create(Topology(4, ep=2), gloo=(), independent=kinds) as held:
        collection = process_group_collection(held, all_gather=True)
        if "dp_cp_ag" in vars(collection):
            assert collection.dp_cp_ag is held.independent_group("dp-cp")
            assert collection.expt_dp_ag is held.independent_group("edp")
            assert collection.dp_cp_ag is not collection.dp_cp


def _rank_main(
    rank: int, world_size: int, folder: str, layouts: list[dict[str, Any]], oracle: str | None
) -> None:
    warnings.simplefilter("ignore")
    _bare_megatron(oracle)
    records = [{"megatron": _megatron(layout), "ours": _ours(layout)} for layout in layouts]
    _own_second_communicators()
    Path(folder, f"rank{rank}.json").write_text(json.dumps(records))


def _compare(folder: Path, layouts: list[dict[str, Any]], world_size: int, fields: int) -> None:
    for rank in range(world_size):
        records = json.loads((folder / f"rank{rank}.json").read_text())
        for layout, record in zip(layouts, records, strict=True):
            theirs, ours = record["megatron"], record["ours"]
            assert len(theirs) == fields, (layout, sorted(theirs))
            assert sorted(ours) == sorted(theirs), (layout, rank)
            different = {k: (ours[k], theirs[k]) for k in theirs if ours[k] != theirs[k]}
            assert not different, (layout, rank, different)


def test_every_field_equals_megatron_0_19(tmp_path: Path) -> None:
    """All 27 fields of 0.19.2's collection hold Megatron's ranks (GTP, EGTP, all-gather)."""
    oracle = str(oracle_0_19())
    run_world(WORLD, _rank_main, str(tmp_path), LAYOUTS_0_19, oracle, timeout=240)
    _compare(tmp_path, LAYOUTS_0_19, WORLD, 27)


def test_every_field_equals_megatron_0_16(tmp_path: Path) -> None:
    """All 20 fields of the installed 0.16.1's collection hold Megatron's ranks."""
    from importlib.metadata import version

    if version("megatron-core") != "0.16.1":
        pytest.skip(f"megatron-core {version('megatron-core')} is installed; this is 0.16.1's")
    run_world(WORLD, _rank_main, str(tmp_path), LAYOUTS_0_16, None, timeout=240)
    _compare(tmp_path, LAYOUTS_0_16, WORLD, 20)


def test_all_gather_on_groups_of_your_own_needs_their_second_communicators() -> None:
    """all_gather=True with groups made without independent= is refused with the fix."""
    from topology import Topology, TopologyError
    from topology_torch import ProcessGroups
    from topology_torch.compat.megatron import process_group_collection

    from .world import fake_world

    with fake_world(8, 3):
        plain = ProcessGroups.create(Topology(8, tp=2), gloo=())
        with pytest.raises(TopologyError, match=r"pass independent=\('dp-cp',\) to ProcessGroups"):
            process_group_collection(plain, all_gather=True)
        with pytest.raises(TopologyError, match="all_gather must be True or False, got 'yes'"):
            process_group_collection(plain, all_gather="yes")  # type: ignore[arg-type]
        assert process_group_collection(plain).tp is plain.group("tp")
