"""The role of a Hugging Face checkpoint tensor: what it is in the model, whatever its name.

A role, with the model's config and an engine's layout, decides how the engine shards the tensor.
A bias has its weight's role (``q_proj.bias`` is ``q``). ``expert_gate``/``expert_up``/
``expert_down`` are a routed expert's ``gate_proj``/``up_proj``/``down_proj`` (Mixtral's
``w1``/``w3``/``w2``); ``shared_*`` are DeepSeek's shared experts; ``q_a``/``q_b``/``kv_a``/``kv_b``
are multi-head latent attention's ``q_a_proj``/``q_b_proj``/``kv_a_proj_with_mqa``/``kv_b_proj``;
``norm`` is every norm weight (any 1-dim replicated tensor).

>>> len(ROLES), ROLES[:3]
(22, ('embedding', 'lm_head', 'norm'))
"""

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
