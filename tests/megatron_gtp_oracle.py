"""Megatron-core's own ``initialize_model_parallel`` as an oracle for GTP and hybrid-CP layouts.

A script, run by ``tests/test_gtp_megatron.py`` and ``tests/test_hybrid_cp.py`` in a subprocess
with ``PYTHONPATH`` set to an unpacked megatron-core (0.19.2 by default): it reads a JSON list of
layouts from stdin and writes, per layout, either the groups Megatron creates
(``[[group_desc, ranks], ...]`` in creation order) or the error it raises. No process group is
made: ``create_group`` is replaced by a recorder and ``torch.distributed`` answers as rank 0 of
an initialised world of ``local_world_size`` ranks.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

# Run as a script, this folder is sys.path[0]: its `torch/` (the torch tests) would shadow torch.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(__file__)]

import torch  # noqa: E402
from megatron.core import parallel_state  # noqa: E402

created: list[tuple[str, list[int]]] = []


def record(ranks: Any = None, group_desc: Any = None, **_: Any) -> str:
    created.append((str(group_desc), [int(r) for r in ranks]))
    return str(group_desc)


def run(layout: dict[str, Any]) -> dict[str, Any]:
    created.clear()
    try:
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=layout["tp"],
            pipeline_model_parallel_size=layout["pp"],
            context_parallel_size=layout["cp"],
            expert_model_parallel_size=layout["ep"],
            expert_tensor_parallel_size=layout["etp"],
            gtp_remat_size=layout["gtp"],
            expert_gtp_remat_size=layout["egtp"],
            num_distributed_optimizer_instances=layout["dist_opt_instances"],
            order=layout["order"],
            create_gloo_process_groups=False,
            local_world_size=layout["world_size"],
            hybrid_context_parallel=layout.get("hybrid_context_parallel", False),
        )
        return {"groups": list(created)}
    except (AssertionError, RuntimeError, ValueError, IndexError, KeyError) as error:
        return {"error": f"{type(error).__name__}: {error}"}
    finally:
        parallel_state.destroy_model_parallel()


def main() -> None:
    parallel_state.create_group = record
    torch.distributed.is_initialized = lambda: True
    torch.distributed.get_rank = lambda group=None: 0
    layouts = json.load(sys.stdin)
    json.dump([run(layout) for layout in layouts], sys.stdout)


if __name__ == "__main__":
    main()
