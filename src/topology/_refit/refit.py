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
from typing import Any

import attrs

from .._architecture.architecture import Architecture
from .._args import check_index, show
from .._engine.layout import EngineLayout
from .._errors import TopologyError
from .._machine.allocation import Allocation
from .._machine.rankmap import RankMap
from .._megatron.split.split import PipelineSplit
from .._megatron.topology import Topology
from .._transfer.params import Param
from .._transfer.plan import RankTransfer, Transfer, TransferOp, transfer
from .._transfer.planner import bulk
from .._transfer.rank import transfer_rank
from .._transfer.weights import architecture_of, weights
from .metadata import engine_table
from .target import Box, EngineTarget, Landing

__all__ = ["RankRefit", "Refit", "engine_layout", "refit", "refit_rank"]


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
        return _boxes(self.target, op)

    def for_rank(self, rank: int) -> RankRefit:
        """World rank ``rank``'s part (``Transfer.for_rank``) with its landing in the engine.

        Raises:
            TopologyError: ``rank`` is no int in ``range(`` the ranks both sides span ``)``.
        """
        return RankRefit(self.plan.for_rank(rank), self.engine, self.target)

    def table(self) -> list[dict[str, Any]]:
        """Each Hugging Face tensor's sharding in the engine: the ``params`` metadata (see
        ``docs/engines.md``): name, shape, dtype, and which ranks hold which box of it in which
        box of which local tensor."""
        return engine_table(self.target)

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


@attrs.frozen
class RankRefit:
    """One rank's part of a :class:`Refit` (from :meth:`Refit.for_rank`, or
    :func:`refit_rank` without the whole plan): its operations and where its receipts land."""

    part: RankTransfer
    engine: EngineLayout
    target: EngineTarget = attrs.field(eq=False, repr=False)

    @property
    def rank(self) -> int:
        """The world rank."""
        return self.part.rank

    @property
    def sends(self) -> tuple[TransferOp, ...]:
        """What it sends, in plan order."""
        return self.part.sends

    @property
    def recvs(self) -> tuple[TransferOp, ...]:
        """What it receives, in plan order."""
        return self.part.recvs

    @property
    def ops(self) -> tuple[TransferOp, ...]:
        """Its sends, then its receives."""
        return self.part.ops

    def boxes(self, op: TransferOp) -> tuple[tuple[str, Box], ...]:
        """As :meth:`Refit.boxes`."""
        return _boxes(self.target, op)

    def table(self) -> list[dict[str, Any]]:
        """As :meth:`Refit.table` (the whole engine's, not only this rank's)."""
        return engine_table(self.target)

    def tensors(self) -> dict[str, tuple[int, ...]]:
        """Its local engine tensors and their shapes (padding included), in the order of
        Megatron's weights (empty: not an engine rank)."""
        found: dict[str, tuple[int, ...]] = {}
        for param in {id(h.param): h.param for h in self.target.weights}.values():
            for run in self.target.landing(param, self.rank):
                found[run.name] = run.shape
        return found


def _boxes(target: EngineTarget, op: TransferOp) -> tuple[tuple[str, Box], ...]:
    """The boxes of its receiver's local tensors ``op`` fills (see :meth:`Refit.boxes`)."""
    if not isinstance(op, TransferOp):
        raise TopologyError(f"op must be a TransferOp, got {show(op)}")
    start, stop = op.dst_start, op.dst_start + op.stop - op.start
    found = []
    for run in target.landing(op.param, op.dst):
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
            f"rank {op.dst} holds no {op.param.name}[{start}:{stop}] in {target.layout}; "
            "give an operation of this plan"
        )
    return tuple(found)


def _prepared(
    engine: EngineLayout | str, model: str | Architecture, rank_offset: int, itemsize: int
) -> tuple[EngineTarget, Topology, list[Param]]:
    """The engine's target, its ranks as a destination layout and Megatron's weights."""
    layout = engine_layout(engine)
    offset = check_index("rank_offset", rank_offset)
    found = architecture_of(model)
    params = weights(found, itemsize)
    target = EngineTarget(layout, found, rank_offset=offset, itemsize=itemsize)
    return target, Topology(layout.world_size, rank_offset=offset), params


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
    with bulk():  # the engine's placements: acyclic tuples and records
        target, dst, params = _prepared(engine, model, rank_offset, itemsize)
    plan = transfer(
        src,
        dst,
        params,
        allocation=allocation,
        num_layers=target.model.layers,
        src_pipeline_split=src_pipeline_split,
        target=target,
        relay=relay,
    )
    return Refit(plan, target.layout, target.model, dst.rank_offset, target)


def refit_rank(
    src: Topology,
    engine: EngineLayout | str,
    model: str | Architecture,
    rank: int,
    *,
    rank_offset: int = 0,
    allocation: Allocation | RankMap | None = None,
    src_pipeline_split: PipelineSplit | None = None,
    itemsize: int = 2,
    relay: bool = False,
) -> RankRefit:
    """World rank ``rank``'s part of :func:`refit`'s plan without the whole plan: equal to
    ``refit(src, engine, model, ...).for_rank(rank)`` (one planning pass keeping only its
    operations, as :func:`~topology.transfer_rank`).

    Args:
        src, engine, model, rank_offset, allocation, src_pipeline_split, itemsize, relay: as
            for :func:`refit`.
        rank: the world rank, in ``range`` of the ranks both sides span.

    Raises:
        TopologyError: what :func:`refit` raises, or a rank outside both sides' ranks.

    >>> from topology import Architecture, Topology
    >>> llama = Architecture(2, 16, 64, 32, 4, 2, 4)
    >>> mine = refit_rank(Topology(2, tp=2), "engine=vllm,tp=4", llama, 3, rank_offset=2)
    >>> mine.boxes(mine.recvs[0])
    (('model.embed_tokens.weight', ((0, 16), (0, 16))),)
    >>> mine.tensors()["model.layers.0.self_attn.qkv_proj.weight"]
    (12, 16)
    """
    with bulk():  # the engine's placements and the pass make acyclic tuples and records
        target, dst, params = _prepared(engine, model, rank_offset, itemsize)
        part = transfer_rank(
            src,
            dst,
            params,
            rank,
            allocation=allocation,
            num_layers=target.model.layers,
            src_pipeline_split=src_pipeline_split,
            target=target,
            relay=relay,
        )
    return RankRefit(part, target.layout, target)
