"""Megatron-core 0.19.2's own ``HyperCommGrid`` as an oracle (a script, one process, many cases).

Run by ``tests/torch/test_hyper_comm_grid.py`` and ``tests/torch/test_mimo.py`` with the unpacked
0.19.2 wheel on ``PYTHONPATH``: it reads one JSON case per line from stdin and answers one JSON
line each, until stdin closes. A case is ``{"shape", "names", "offset", "view": null or {"shape",
"names", "shared"}, "asks": [[dims, in_view], ...]}``; the answer is ``{"enums": [...]}`` (one rank
enumeration per ask, from ``get_rank_enum``) or ``{"error": "<class name>"}`` where Megatron
refuses the grid or the view; ``"embeddings": true`` adds Megatron's embedding and position
embedding groups (``default_embedding_ranks`` of each ``pp`` group, as MIMO makes them);
``"gens": [dims, ...]`` adds ``"gens"`` (``_gen_rank_enum(dims)``: members in the given dim order,
which Megatron's ``BridgeCommunicator`` reads) and ``"orders"`` (``_order_dims_for``). No process
group is made (``WORLD_SIZE`` is set for the grid).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

# Run as a script, this folder is sys.path[0]: it must not shadow anything Megatron imports.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(__file__)]
os.environ.setdefault("WORLD_SIZE", str(2**40))

from megatron.core.hyper_comm_grid import HyperCommGrid  # noqa: E402
from megatron.core.parallel_state import (  # noqa: E402
    default_embedding_ranks,
    default_position_embedding_ranks,
)


def answer(case: dict[str, Any]) -> dict[str, Any]:
    try:
        grid = HyperCommGrid(case["shape"], case["names"], rank_offset=case["offset"])
        view = case.get("view")
        if view is not None:
            grid.register_view("v", view["shape"], view["names"], shared_dims=view["shared"])
    except Exception as error:  # Megatron refuses the layout: the class is the answer
        return {"error": type(error).__name__}
    answer: dict[str, Any] = {
        "enums": [
            grid.get_rank_enum(list(dims), view="v" if in_view else None)
            for dims, in_view in case["asks"]
        ]
    }
    if "gens" in case:  # the private enumeration Megatron's communicators call
        answer["gens"] = [grid._gen_rank_enum(list(dims)) for dims in case["gens"]]
        answer["orders"] = [grid._order_dims_for(grid.dim_names, list(d)) for d in case["gens"]]
    if case.get("embeddings"):
        pipelines = grid.get_rank_enum("pp")
        answer["embeddings"] = [
            [default_embedding_ranks(list(p)) for p in pipelines],
            [default_position_embedding_ranks(list(p)) for p in pipelines],
        ]
    return answer


def main() -> None:
    for line in sys.stdin:
        print(json.dumps(answer(json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
