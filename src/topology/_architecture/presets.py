"""The model presets: one table of :class:`Architecture` rows, read by the cost and the transfer.

Each row is read from the preset's shipped Hugging Face ``config.json`` (``configs/<name>.json``,
package data) plus its published counts (:data:`PUBLISHED`); every other fact about a preset lives
in that file. ``topology.cost.MODELS`` is a view of this table (each row trained at the cost
model's step) and ``topology.weights(name)`` lists a row's weights for ``topology transfer
--model``; neither holds a copy of a shape or a count.

>>> ARCHITECTURES["llama-70b"].layers, ARCHITECTURES["llama-70b"].parameters
(80, 69000000000)
>>> [name for name, row in ARCHITECTURES.items() if row.is_moe]
['mixtral-8x7b', 'deepseek-v3']
"""

from __future__ import annotations

import os

import attrs

from .architecture import Architecture
from .config import read_model_config

__all__ = ["ARCHITECTURES", "CONFIGS", "PUBLISHED"]

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
"""The folder of the presets' shipped ``config.json`` files (``<name>.json``, package data)."""

PUBLISHED = {
    "llama-7b": (6_740_000_000, 0),
    "llama-13b": (13_000_000_000, 0),
    "llama-70b": (69_000_000_000, 0),
    "mixtral-8x7b": (46_700_000_000, 45_100_000_000),
    "deepseek-v3": (671_000_000_000, 653_900_000_000),
}
"""Each preset's published counts (``parameters``, ``expert_parameters``); no config holds them."""


def _preset(name: str, parameters: int, expert_parameters: int) -> Architecture:
    """The row of preset ``name``: its shipped config, with its published counts."""
    row = read_model_config(os.path.join(CONFIGS, f"{name}.json"))
    return attrs.evolve(row, parameters=parameters, expert_parameters=expert_parameters)


ARCHITECTURES = {name: _preset(name, *counts) for name, counts in PUBLISHED.items()}
"""The presets, by name: Llama 2 7B / 13B / 70B (Touvron et al. 2023), Mixtral 8x7B (Jiang et al.
2024: 8 experts of 3 * 4096 * 14336 weights in each of 32 layers, top-2) and DeepSeek-V3
(DeepSeek-AI 2024: 61 layers (3 dense), hidden 7168, multi-head latent attention, 256 routed
experts of 3 * 7168 * 2048 weights in each of 58 MoE layers (653.9e9) plus one shared expert,
top-8, the router's score bias), from their public configs; DeepSeek-V3 without its
multi-token-prediction module.

``parameters`` and ``expert_parameters`` are the published counts (6.74e9, 13e9, 69e9, 46.7e9 of
which 45.1e9 in experts, 671e9 of which 653.9e9 in experts), which the cost model uses as they
are; the shapes' own sums differ slightly (6,738,415,616 for Llama 2 7B).

DeepSeek-V3's 61 layers split unevenly: at pp 16 NeMo-RL's recipe gives
``PipelineSplit(first_stage_layers=3, last_stage_layers=2)``, pass it to
:func:`topology.transfer` (``--first-stage-layers 3 --last-stage-layers 2``)."""
