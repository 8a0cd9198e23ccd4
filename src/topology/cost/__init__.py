"""An analytic cost model of a training step, computed on a Topology's real groups (seed 003).

No sleeping, no GPUs: step time = compute + the collectives each parallel dimension (tp, cp, ep,
pp, dp) runs on its groups, with alpha-beta costs over the slowest link a group crosses, plus the
pipeline bubble; memory per GPU flags layouts that cannot fit. :func:`plan` ranks every layout of
a world size.

>>> from topology import Cluster, Topology
>>> from topology.cost import H100_NODE, MODELS, estimate
>>> e = estimate(Topology(64, tp=8, pp=2), Cluster(8), MODELS["llama-13b"], H100_NODE)
>>> e.link("tp"), e.link("dp"), e.fits
('intra', 'inter', True)
"""

from ._collectives import (
    all_gather,
    all_reduce,
    all_to_all,
    p2p,
    reduce_scatter,
    sequential_ring,
)
from ._estimate import DIMENSIONS, Estimate, estimate
from ._hardware import A100_NODE, H100_NODE, HARDWARE, TOY_GPU, Hardware, Link
from ._inputs import load_hardware, load_model
from ._memory import Memory
from ._model import MODELS, Model, Workload
from ._plan import DEFAULT_ORDERS, Plan, plan
from ._scenarios import SCENARIOS, TOY_WORKLOAD, Scenario, scenario

__all__ = [
    "A100_NODE",
    "DEFAULT_ORDERS",
    "DIMENSIONS",
    "H100_NODE",
    "HARDWARE",
    "MODELS",
    "SCENARIOS",
    "TOY_GPU",
    "TOY_WORKLOAD",
    "Estimate",
    "Hardware",
    "Link",
    "Memory",
    "Model",
    "Plan",
    "Scenario",
    "Workload",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "estimate",
    "load_hardware",
    "load_model",
    "p2p",
    "plan",
    "reduce_scatter",
    "scenario",
    "sequential_ring",
]
