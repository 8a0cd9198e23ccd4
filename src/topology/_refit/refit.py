"""``topology.refit``: the transfer plan from a Megatron layout into a generation engine's ranks.

The destination is an engine's layout (:class:`~topology._engine.layout.EngineLayout`): each
engine rank receives exactly what the engine's rules say it holds of every Hugging Face tensor
(:mod:`topology._refit.target`). The plan is an ordinary ``Transfer`` over Megatron's weights (a
destination offset is Megatron's shard position); :meth:`Refit.boxes` turns an operation's
destination into boxes of the engine's local tensors, :meth:`Refit.tensors` lists a rank's local
tensors.

>>> from topology import Architecture, Topology, refit
>>> llama = Architecture(2, 16, 64, 32, 4, 2, 4)
>>> plan = refit(Topology(2, tp=2), "engine=vllm,tp=4", llama, rank_offset=2)
>>> plan.tensors(3)["model.layers.0.self_attn.qkv_proj.weight"]
(12, 16)
>>> op = plan.recvs(3)[0]
>>> op.param.name, op.dst_start, plan.boxes(op)
('embedding.word_embeddings.weight', 0, (('model.embed_tokens.weight', ((0, 16), (0, 16))),))
"""

from __future__ import annotations

import functools

import attrs

from .._architecture.architecture import Architecture
from .._args import check_index, show
from .._engine.layout import EngineLayout
from .._errors import TopologyError
from .._machine.allocation import Allocation
from .._machine.rankmap import RankMap
from .._megatron.split.split import PipelineSplit
from .._megatron.topology import Topology
from .._transfer.hf_weights import hf_weights
from .._transfer.params import Param
from .._transfer.plan import Transfer, TransferOp, transfer
from .._transfer.weights import architecture_of
from .target import Box, EngineTarget, Landing

__all__ = ["Refit", "engine_layout", "refit"]


def engine_layout(engine: object) -> EngineLayout:
    """``engine`` itself, or the layout its string names (``engine=vllm,tp=8,dp=2``).

    Raises:
        TopologyError: neither an :class:`EngineLayout` nor a layout string it reads.
    """
    if isinstance(engine, EngineLayout):
        return engine
    if not isinstance(engine, str):
        raise TopologyError(
            f"engine must be an EngineLayout or a string like engine=vllm,tp=8, got "
            f"{show(engine)} ({type(engine).__name__})"
        )
    return EngineLayout.from_string(engine)


@attrs.frozen
class Refit:
    """A plan into an engine (from :func:`refit`): the ``Transfer`` and the engine's landing.

    ``plan``'s operations address Megatron's weights: a destination offset is a position in the
    receiver's shard of the weight (its ranges laid one after another, as the engine lays
    them out); :meth:`boxes` says where that is in the engine's local tensors.
    """

    plan: Transfer
    engine: EngineLayout
    model: Architecture
    rank_offset: int
    target: EngineTarget = attrs.field(eq=False, repr=False)

    def sends(self, rank: int) -> tuple[TransferOp, ...]:
        """What world rank ``rank`` sends (``Transfer.sends``)."""
        return self.plan.sends(rank)

    def recvs(self, rank: int) -> tuple[TransferOp, ...]:
        """What world rank ``rank`` receives (``Transfer.recvs``)."""
        return self.plan.recvs(rank)

    def held(self, rank: int) -> tuple[TransferOp, ...]:
        """What world rank ``rank`` copies from its own source shard (``Transfer.held``)."""
        return self.plan.held(rank)

    def landing(self, param: Param, rank: int) -> tuple[Landing, ...]:
        """Where ``param``'s shard on world rank ``rank`` sits in its local tensors."""
        return self.target.landing(param, rank)

    def boxes(self, op: TransferOp) -> tuple[tuple[str, Box], ...]:
        """The boxes of the receiver's local tensors that ``op`` fills, as ``(engine tensor name,
        box)``, in order along the weight's cut dim.

        Raises:
            TopologyError: ``op`` is not an operation of this plan's receivers.
        """
        if not isinstance(op, TransferOp):
            raise TopologyError(f"op must be a TransferOp, got {show(op)}")
        start, stop = op.dst_start, op.dst_start + op.stop - op.start
        found = []
        for run in self.landing(op.param, op.dst):
            a, z = max(start, run.start), min(stop, run.stop)
            if a < z:
                box = run.part(a, z)
                if op.rows is not None and op.param.cut_dim != 0:
                    lead = run.dim - op.param.cut_dim
                    top = box[lead][0] + op.rows[3]
                    box = (*box[:lead], (top, top + op.rows[1] - op.rows[0]), *box[lead + 1 :])
                found.append((run.name, box))
        if not found:
            raise TopologyError(
                f"rank {op.dst} holds no {op.param.name}[{start}:{stop}] in {self.engine}; "
                "give an operation of this plan"
            )
        return tuple(found)

    @functools.cached_property
    def _tensors(self) -> dict[int, dict[str, tuple[int, ...]]]:
        found: dict[int, dict[str, tuple[int, ...]]] = {}
        for param in self.plan.params:
            for world in self.target.holders(param):
                for run in self.landing(param, world):
                    found.setdefault(world, {})[run.name] = run.shape
        return found

    def tensors(self, rank: int) -> dict[str, tuple[int, ...]]:
        """World rank ``rank``'s local engine tensors and their shapes (padding included), in
        the order of Megatron's weights.

        Raises:
            TopologyError: ``rank`` is not one of the engine's ranks.
        """
        last = self.rank_offset + self.engine.world_size - 1
        check_index("rank", rank, at_most=last, why="the engine's last rank")
        if rank < self.rank_offset:
            raise TopologyError(
                f"rank {rank} is before the engine's first rank {self.rank_offset}; give one of "
                f"{self.rank_offset}..{last}"
            )
        return dict(self._tensors.get(rank, {}))


def refit(
    src: Topology,
    engine: EngineLayout | str,
    model: str | Architecture,
    *,
    rank_offset: int = 0,
    allocation: Allocation | RankMap | None = None,
    src_pipeline_split: PipelineSplit | None = None,
    itemsize: int = 2,
    relay: bool = False,
) -> Refit:
    """The plan that moves ``model``'s weights from Megatron layout ``src`` into ``engine``.

    Args:
        src: the training layout.
        engine: the generation engine's layout (``"engine=vllm,tp=8,dp=2,ep=16"`` or an
            :class:`EngineLayout`; ``engine=hf`` holds whole tensors).
        model: a preset name or an :class:`Architecture` (``topology.read_model_config``).
        rank_offset: the engine's first world rank (0: colocated with ``src``'s ranks).
        allocation: where ranks run (see ``topology.transfer``).
        src_pipeline_split: ``src``'s pipeline split (see ``topology.transfer``).
        itemsize: bytes per element.
        relay: with an allocation, the relay step (see ``topology.transfer``).

    Returns:
        A :class:`Refit`.

    Raises:
        TopologyError: bad arguments, a size the engine cannot cut a tensor into, or a cut the
            planner cannot express (an engine cutting a dim Megatron does not).

    >>> from topology import Architecture, Topology
    >>> mixtral = Architecture(1, 8, 64, 16, 4, 2, 2, experts=4, top_k=2, moe_ffn=16)
    >>> plan = refit(Topology(2, ep=2), "engine=vllm,tp=2,dp=2,ep=4", mixtral, rank_offset=2)
    >>> {n: s for n, s in plan.tensors(3).items() if ".experts." in n}  # one expert, whole
    {'model.layers.0.mlp.experts.w13_weight': (1, 32, 8), \
'model.layers.0.mlp.experts.w2_weight': (1, 8, 16)}
    >>> plan.plan.stats["max_send_bytes"] == plan.plan.stats["max_send_bound"]
    True
    """
    layout = engine_layout(engine)
    offset = check_index("rank_offset", rank_offset)
    found = architecture_of(model)
    tensors = hf_weights(found, itemsize)
    params = list({id(h.param): h.param for h in tensors}.values())
    target = EngineTarget(layout, found, rank_offset=offset, hf=tensors)
    dst = Topology(layout.world_size, rank_offset=offset)
    plan = transfer(
        src,
        dst,
        params,
        allocation=allocation,
        num_layers=found.layers,
        src_pipeline_split=src_pipeline_split,
        target=target,
        relay=relay,
    )
    return Refit(plan, layout, found, offset, target)
