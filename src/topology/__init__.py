"""rank-topology's pure core: which global ranks form which parallel group.

Standard library and attrs only; no torch. See :class:`Topology` and :class:`Grid`.

>>> from topology import Topology
>>> topo = Topology(16, tp=2, pp=4)
>>> topo.group_of(5, "tp"), topo.group_of(5, "dp"), topo.pipeline(5).next
((4, 5), (5, 7), 9)
"""

from ._architecture.architecture import Architecture
from ._architecture.config import read_model_config
from ._engine.layout import EngineLayout
from ._errors import TopologyError
from ._layout.axis_groups import AxisGroups
from ._layout.grid import Grid
from ._layout.groups import DerivedGroups, GroupList, OrthogonalGroups  # noqa: F401 (kept importable)
from ._layout.hierarchy import hierarchical_groups
from ._layout.kind import Kind
from ._machine.allocation import Allocation
from ._machine.cluster import Cluster
from ._machine.hostlist import compress_hostlist, expand_hostlist
from ._machine.hosts import Host, Tier
from ._machine.rankmap import Location, RankMap
from ._machine.readers.hostfile import read_hostfile
from ._machine.readers.native_format import read_allocation
from ._machine.readers.slurm_topology import read_slurm_topology
from ._machine.readers.topograph import read_topograph
from ._megatron.hybrid_cp import hybrid_cp_groups
from ._megatron.pipeline import Pipeline
from ._megatron.rank_info import RankInfo
from ._megatron.split.split import PipelineSplit
from ._megatron.topology import Topology
from ._modules.bridge import Bridge, Handoff, bridge
from ._modules.mimo import mimo_layout
from ._modules.module import Module
from ._modules.modules import Modules
from ._modules.schedule import Creation
from ._preflight.check import check
from ._preflight.crossings import Crossings, crossings
from ._preflight.findings import Finding
from ._preflight.modules.check import check_modules
from ._preflight.modules.place import ModulesArrangement, place_modules
from ._preflight.modules.report import ModulesReport
from ._preflight.place.place import Arrangement, place
from ._preflight.placement import Placement
from ._preflight.report import Report
from ._refit.refit import RankRefit, Refit, refit, refit_rank
from ._refit.target import Landing
from ._reshape.grow import Growth, Pull, grow
from ._reshape.reshape import Reshape, reshape
from ._transfer.hf_weights import HFWeight, hf_weights
from ._transfer.param_placement import ParamPlacement, ParamShard, param_placement
from ._transfer.params import Param
from ._transfer.plan import RankTransfer, Transfer, TransferOp, transfer
from ._transfer.rank import transfer_rank
from ._transfer.timing import TransferTime, transfer_time
from ._transfer.weights import weights

__all__ = [
    "Allocation",
    "Architecture",
    "Arrangement",
    "AxisGroups",
    "Bridge",
    "Cluster",
    "Creation",
    "Crossings",
    "EngineLayout",
    "Finding",
    "Grid",
    "GroupList",
    "Growth",
    "HFWeight",
    "Handoff",
    "Host",
    "Kind",
    "Landing",
    "Location",
    "Module",
    "Modules",
    "ModulesArrangement",
    "ModulesReport",
    "Param",
    "ParamPlacement",
    "ParamShard",
    "Pipeline",
    "PipelineSplit",
    "Placement",
    "Pull",
    "RankInfo",
    "RankMap",
    "RankRefit",
    "RankTransfer",
    "Refit",
    "Report",
    "Reshape",
    "Tier",
    "Topology",
    "TopologyError",
    "Transfer",
    "TransferOp",
    "TransferTime",
    "bridge",
    "check",
    "check_modules",
    "compress_hostlist",
    "crossings",
    "expand_hostlist",
    "grow",
    "hf_weights",
    "hierarchical_groups",
    "hybrid_cp_groups",
    "mimo_layout",
    "param_placement",
    "place",
    "place_modules",
    "read_allocation",
    "read_hostfile",
    "read_model_config",
    "read_slurm_topology",
    "read_topograph",
    "refit",
    "refit_rank",
    "reshape",
    "transfer",
    "transfer_rank",
    "transfer_time",
    "weights",
]

__version__ = "0.1.0"
