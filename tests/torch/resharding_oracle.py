"""Megatron-core 0.19.2's resharding planner as an oracle (a script, one process, many cases).

Run by ``tests/torch/test_transfer_megatron.py`` with the unpacked 0.19.2 wheel on
``PYTHONPATH``: it reads one JSON case per line from stdin and answers one JSON line each, until
stdin closes. A case is ``{"src": [meta, ...], "dst": [meta, ...]}``, one ``meta`` per (rank,
weight) a model holds, in rank order, with ``ParameterMetadata``'s fields (``name`` doubles as
``resolved_name``). The planner's pure part runs on them as it does after its
``all_gather_object``: ``_iter_global_transfer_ops`` replays the whole schedule (every rank's
sends and receives; no process group). The answer is ``{"ops": [[dst, src, name, dim, src_start,
src_stop, dst_start, dst_stop], ...]}`` (the starts and stops ``null`` for a whole tensor) or
``{"error": "<class>: <message>"}`` where Megatron refuses the case. A case ``{"gtp": [[rows, size],
...]}`` asks GTP's ``gtp_remat_shard_dim0`` instead (how many rows each of ``size`` GTP ranks
stores of a tensor-parallel shard of ``rows`` rows, and the padding): ``{"gtp": [[shard_rows,
pad_length], ...]}``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

# Run as a script, this folder is sys.path[0]: it must not shadow anything Megatron imports.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(__file__)]

import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402

import megatron.core  # noqa: E402
import torch  # noqa: E402

# The package's __init__ pulls in refit and its execution stack (triton, a GPU); the planner and
# its metadata need only torch, so the package is registered without running its __init__.
_FOLDER = Path(megatron.core.__file__).parent / "resharding"
_SPEC = importlib.util.spec_from_loader("megatron.core.resharding", loader=None, is_package=True)
assert _SPEC is not None
_PACKAGE = importlib.util.module_from_spec(_SPEC)
_PACKAGE.__path__ = [str(_FOLDER)]
sys.modules["megatron.core.resharding"] = _PACKAGE

from megatron.core.resharding.planner import _iter_global_transfer_ops  # noqa: E402
from megatron.core.resharding.utils import ParameterMetadata  # noqa: E402
from megatron.core.tensor_parallel.generalized_tensor_parallelism import (  # noqa: E402
    gtp_remat_shard_dim0,
)


class Group:
    """The one thing ``gtp_remat_shard_dim0`` asks of a process group: its size."""

    def __init__(self, size: int) -> None:
        self.count = size

    def size(self) -> int:
        return self.count


def metadata(fields: dict[str, Any]) -> ParameterMetadata:
    return ParameterMetadata(
        **{**fields, "shape": tuple(fields["shape"]), "dtype": torch.bfloat16},
        resolved_name=fields["name"],
    )


def bounds(part: Any) -> list[int | None]:
    return [None, None] if part.start is None else [part.start, part.stop]


def answer(case: dict[str, Any]) -> dict[str, Any]:
    if "gtp" in case:
        return {
            "gtp": [list(gtp_remat_shard_dim0(rows, Group(size))) for rows, size in case["gtp"]]
        }
    dst: dict[int, dict[str, ParameterMetadata]] = {}
    for fields in case["dst"]:
        dst.setdefault(fields["owner_rank"], {})[fields["name"]] = metadata(fields)
    src: dict[str, list[ParameterMetadata]] = {}
    for fields in case["src"]:
        src.setdefault(fields["name"], []).append(metadata(fields))
    ops = []
    try:
        for _, dst_rank, src_rank, src_slice, dst_slice, _, meta in _iter_global_transfer_ops(
            dst, src
        ):
            dim = meta.partition_dim
            ops.append(
                [
                    dst_rank,
                    src_rank,
                    meta.name,
                    dim,
                    *bounds(src_slice[dim]),
                    *bounds(dst_slice[dim]),
                ]
            )
    except Exception as error:  # Megatron refuses the case: the class and message are the answer
        return {"error": f"{type(error).__name__}: {error}"}
    return {"ops": ops}


def main() -> None:
    for line in sys.stdin:
        print(json.dumps(answer(json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
