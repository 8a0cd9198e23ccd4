"""Megatron-core's own pipeline split as an oracle for ``PipelineSplit`` (a script).

Run by ``tests/test_pipeline_split_megatron.py`` in a subprocess with ``PYTHONPATH`` set to an
unpacked megatron-core (0.19.2): it reads a JSON list of cases (``num_layers``, ``pp``, ``vpp``
and Megatron's five split fields) from stdin and writes, per case, either the layers every
``[stage][chunk]`` builds (``range(offset, offset + count)`` from ``get_transformer_layer_offset``
and ``get_num_layers_to_build``, counts kept even when negative) or the error Megatron raises
(in ``TransformerConfig`` or in those functions). No process group is made: the pipeline rank
and the virtual pipeline size are set in ``parallel_state`` as a rank would have them.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

# Run as a script, this folder is sys.path[0]: its `torch/` (the torch tests) would shadow torch.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(__file__)]

import types  # noqa: E402

import torch  # noqa: E402

try:
    import triton  # noqa: F401
except ImportError:  # CPU torch: stand in for the one module of Triton kernels on the import path
    _kernels = types.ModuleType("megatron.core.transformer.moe.ops.paged_stash")
    _kernels.__dict__.update(
        GLOBAL_BLOCK_SIZE=1024, paged_stash_copy_kernel=None, paged_stash_pop_kernel=None
    )
    sys.modules[_kernels.__name__] = _kernels

from megatron.core import parallel_state  # noqa: E402
from megatron.core.transformer.transformer_block import get_num_layers_to_build  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402
from megatron.core.transformer.transformer_layer import (  # noqa: E402
    get_transformer_layer_offset,
)

FIELDS = (
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
    "pipeline_model_parallel_layout",
)


def answer(case: dict[str, Any]) -> dict[str, Any]:
    """What Megatron builds for one case, or the error it raises."""
    pp, vpp = case["pp"], case["vpp"]
    layout = case.get("pipeline_model_parallel_layout")
    # A layout's MTP count is its mtp_num_layers (a string's m, a list's "mtp").
    mtp = sum(row.count("mtp") for row in layout) if isinstance(layout, list) else 0
    mtp = layout.count("m") if isinstance(layout, str) else mtp
    try:
        config = TransformerConfig(
            num_layers=case["num_layers"],
            hidden_size=64,
            num_attention_heads=4,
            pipeline_model_parallel_size=pp,
            virtual_pipeline_model_parallel_size=vpp,
            pipeline_dtype=torch.float32,
            mtp_num_layers=mtp or None,
            **{k: case[k] for k in FIELDS if k in case},
        )
        parallel_state.set_virtual_pipeline_model_parallel_world_size(vpp)
        layers = []
        for p in range(pp):
            parallel_state.set_pipeline_model_parallel_rank(p)
            stage = []
            for v in range(vpp or 1):
                vp_stage = v if vpp is not None else None
                offset = get_transformer_layer_offset(config, vp_stage=vp_stage, pp_rank=p)
                count = get_num_layers_to_build(config, vp_stage=vp_stage, pp_rank=p)
                stage.append([int(offset), int(count)])
            layers.append(stage)
    except Exception as error:  # any refusal is an answer
        return {"error": f"{type(error).__name__}: {error}"}
    return {"layers": layers}


def main() -> None:
    cases = json.load(sys.stdin)
    json.dump([answer(case) for case in cases], sys.stdout)


if __name__ == "__main__":
    main()
