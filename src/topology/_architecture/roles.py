"""The role of a Hugging Face checkpoint tensor: what it does in the model (private).

Every tensor of a Hugging Face checkpoint has exactly one role (a bias has its weight's role:
``q_proj.bias`` is ``q``); the role and the config decide how an engine shards the tensor.

>>> len(ROLES), ROLES[:3]
(22, ('embedding', 'lm_head', 'norm'))
"""

from __future__ import annotations

__all__ = ["ROLES"]

ROLES = (
    "embedding",
    "lm_head",
    "norm",
    "q",
    "k",
    "v",
    "o",
    "gate",
    "up",
    "down",
    "router",
    "router_bias",
    "expert_gate",
    "expert_up",
    "expert_down",
    "shared_gate",
    "shared_up",
    "shared_down",
    "q_a",
    "q_b",
    "kv_a",
    "kv_b",
)
"""The roles: ``embedding`` (``model.embed_tokens``), ``lm_head``, ``norm`` (every norm weight:
input/post-attention, final, Qwen3's ``q_norm``/``k_norm``, MLA's ``q_a_layernorm`` and
``kv_a_layernorm``), ``q``/``k``/``v``/``o`` (attention projections; DeepSeek's ``q_proj`` when
``q_lora_rank`` is null is ``q``), ``gate``/``up``/``down`` (a dense MLP), ``router``
(``mlp.gate``), ``router_bias`` (``e_score_correction_bias``), ``expert_gate``/``expert_up``/
``expert_down`` (a routed expert's; Mixtral's ``w1``/``w3``/``w2``), ``shared_gate``/
``shared_up``/``shared_down`` (DeepSeek's shared experts), ``q_a``/``q_b``/``kv_a``/``kv_b``
(MLA's ``q_a_proj``, ``q_b_proj``, ``kv_a_proj_with_mqa``, ``kv_b_proj``)."""
