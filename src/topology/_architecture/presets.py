"""The model presets: one table of :class:`Architecture` rows, read by the cost and the transfer.

Every fact about a preset lives in its row here. ``topology.cost.MODELS`` is a view of this table
(each row trained at the cost model's step) and ``topology.weights(name)`` lists a row's weights
for ``topology transfer --model``; neither holds a copy of a shape or a count.

>>> ARCHITECTURES["llama-70b"].layers, ARCHITECTURES["llama-70b"].parameters
(80, 69000000000)
>>> [name for name, row in ARCHITECTURES.items() if row.is_moe]
['mixtral-8x7b', 'deepseek-v3']
"""

from __future__ import annotations

from .architecture import Architecture

__all__ = ["ARCHITECTURES"]

ARCHITECTURES = {
    "llama-7b": Architecture(32, 4096, 32000, 11008, 32, 32, 128, parameters=6_740_000_000),
    "llama-13b": Architecture(40, 5120, 32000, 13824, 40, 40, 128, parameters=13_000_000_000),
    "llama-70b": Architecture(80, 8192, 32000, 28672, 64, 8, 128, parameters=69_000_000_000),
    "mixtral-8x7b": Architecture(
        32,
        4096,
        32000,
        14336,
        32,
        8,
        128,
        experts=8,
        moe_ffn=14336,
        top_k=2,
        parameters=46_700_000_000,
        expert_parameters=45_100_000_000,
    ),
    "deepseek-v3": Architecture(
        61,
        7168,
        129280,
        18432,
        128,
        128,
        128,
        experts=256,
        moe_ffn=2048,
        dense_layers=3,
        shared_ffn=2048,
        mla=(1536, 512, 128, 64, 128),
        top_k=8,
        parameters=671_000_000_000,
        expert_parameters=653_900_000_000,
    ),
}
"""The presets, by name: Llama 2 7B / 13B / 70B (Touvron et al. 2023), Mixtral 8x7B (Jiang et al.
2024: 8 experts of 3 * 4096 * 14336 weights in each of 32 layers, top-2) and DeepSeek-V3
(DeepSeek-AI 2024: 61 layers (3 dense), hidden 7168, multi-head latent attention, 256 routed
experts of 3 * 7168 * 2048 weights in each of 58 MoE layers (653.9e9) plus one shared expert,
top-8), from their public configs; DeepSeek-V3 without its multi-token-prediction module.

``parameters`` and ``expert_parameters`` are the published counts (6.74e9, 13e9, 69e9, 46.7e9 of
which 45.1e9 in experts, 671e9 of which 653.9e9 in experts), which the cost model uses as they
are; the shapes' own sums differ slightly (6,738,415,616 for Llama 2 7B).

DeepSeek-V3's 61 layers split unevenly: at pp 16 NeMo-RL's recipe gives
``PipelineSplit(first_stage_layers=3, last_stage_layers=2)``, pass it to
:func:`topology.transfer` (``--first-stage-layers 3 --last-stage-layers 2``)."""
