"""An engine's layout as a transfer's destination: each Megatron weight's shards on its ranks.

:class:`EngineTarget` is the planner's target (:class:`~topology._transfer.param_placement.Target`)
for a generation engine: per Megatron :class:`Param`, a
:class:`~topology._transfer.param_placement.ParamPlacement` computed from the engine's rules, and
per (weight, rank) the :class:`Landing` of each run of it in the engine's local tensors.

Algorithm: for each engine rank and each Hugging Face tensor of the weight
(``topology.hf_weights``), the engine's rule (:func:`~topology._engine.rules.holding`) gives boxes
of the Hugging Face tensor and where each lands in a local tensor. A box is mapped to the weight's
coordinates: dim 0 through the tensor's ``blocks`` (one run per block it meets), the other dims
unchanged, and is kept as a range along the weight's cut dim; every other dim must be whole
(an engine cutting a dim Megatron does not cut is refused: no range says it). The runs of a rank
are listed in the order of its local tensors (tensor by tensor, then by position), adjacent runs
merged, so the ranges laid one after another are the rank's engine layout; ranks holding the same
ranges form one shard (vLLM's ranks sharing a KV head). Padding rows of a vocabulary receive
nothing. Each placement is computed once per class (:meth:`EngineTarget.key`: the roles, shapes and
blocks of the weight's tensors, its shape, and its expert: the layer is not in it), and the rules
are asked once per class of ranks (:func:`signatures`: the rule reads a rank only through its
groups, so at 16,384 vLLM ranks a replicated weight costs tp classes, not 16,384 ranks).

>>> from topology import Architecture, Param, weights
>>> from topology._engine.layout import EngineLayout
>>> llama = Architecture(1, 16, 64, 32, 4, 2, 4)
>>> target = EngineTarget(EngineLayout("vllm", tp=4), llama)
>>> qkv = weights(llama)[2]
>>> qkv.name, qkv.shape
('decoder.layers.0.self_attention.linear_qkv.weight', (32, 16))
>>> [(s.ranks, s.ranges) for s in target.placement(qkv, 1).shards]
[((0,), ((0, 4), (8, 16))), ((1,), ((4, 16),)), ((2,), ((16, 20), (24, 32))), ((3,), ((20, 32),))]
>>> target.landing(qkv, 0)[1]
Landing(start=4, stop=12, name='model.layers.0.self_attn.qkv_proj.weight', shape=(12, 16), \
box=((4, 12), (0, 16)), dim=0)
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Hashable, Iterator, Sequence

import attrs

from .._architecture.architecture import Architecture
from .._engine.layout import GROUPS, EngineLayout
from .._engine.rules import PLACEMENTS, Holding, Piece, holding, rule_of
from .._errors import TopologyError
from .._transfer.hf_weights import HFWeight, hf_kind, hf_tensors, hf_weights
from .._transfer.param_placement import ParamPlacement, ParamShard
from .._transfer.params import Param
from .._transfer.weights import weights

__all__ = ["Box", "EngineTarget", "Landing", "Signatures", "engine_name", "signatures"]

Box = tuple[tuple[int, int], ...]
"""``(start, stop)`` per dim of a tensor."""


@attrs.frozen
class Landing:
    """Where one run of a weight's shard sits in an engine rank's local tensor.

    ``[start, stop)`` are positions along the weight's cut dim in the rank's shard (its ranges
    laid one after another); they land in the local tensor ``name`` (of local ``shape``) as
    ``box``, whose dim ``dim`` runs along the weight's cut dim (after a routed expert's leading
    slot dim).
    """

    start: int
    stop: int
    name: str
    shape: tuple[int, ...]
    box: Box
    dim: int

    def part(self, start: int, stop: int) -> Box:
        """The box of shard positions ``[start, stop)`` (within this run)."""
        lo = self.box[self.dim][0] + start - self.start
        return (*self.box[: self.dim], (lo, lo + stop - start), *self.box[self.dim + 1 :])


def engine_name(hf_name: str, param: str) -> str:
    """The engine's full name of the local tensor ``param`` (a rule's, empty: the Hugging Face
    tensor itself) that the tensor ``hf_name`` loads into: ``param`` in place of the module it
    starts with (``experts``, ``gate``), else of the tensor's own module (``q_proj`` ->
    ``qkv_proj``), with ``.weight`` / ``.bias`` kept unless ``param`` ends in its own.

    >>> engine_name("model.layers.0.self_attn.k_proj.bias", "qkv_proj")
    'model.layers.0.self_attn.qkv_proj.bias'
    >>> engine_name("model.layers.1.mlp.experts.3.w1.weight", "experts.w13_weight")
    'model.layers.1.mlp.experts.w13_weight'
    >>> engine_name("model.norm.weight", "")
    'model.norm.weight'
    """
    if not param:
        return hf_name
    parts = hf_name.split(".")
    head = param.split(".")[0]
    at = len(parts) - 1 - parts[::-1].index(head) if head in parts else len(parts) - 2
    own = param.endswith(("_weight", "_bias")) or parts[-1] not in ("weight", "bias")
    return ".".join([*parts[:at], param, *([] if own else parts[-1:])])


_Run = tuple[int, int, int, Box, int]
"""(param start, param stop, position of the Hugging Face tensor, box, dim): one run of a rank."""


def _whole(hf: HFWeight, source: Box, keep: int) -> bool:
    """Whether ``source`` spans every dim of ``hf`` but ``keep``."""
    spans = zip(source, hf.shape, strict=True)
    return all(span == (0, n) for d, (span, n) in enumerate(spans) if d != keep)


def _refuse(hf: HFWeight, layout: EngineLayout, param: Param) -> TopologyError:
    return TopologyError(
        f"{layout} cuts {hf.name} {hf.shape} along a dim Megatron's {param.name} does not cut "
        f"(it cuts dim {param.cut_dim}); this engine's rule cannot be planned from that weight"
    )


def _runs(
    param: Param, hf: HFWeight, position: int, piece: Piece, layout: EngineLayout
) -> Iterator[_Run]:
    """The runs of ``param`` one piece of ``hf`` fills (see the module)."""
    source, target = piece.source, piece.target
    lead = len(target) - len(source)
    cut = param.cut_dim
    if not _whole(hf, source, cut):
        raise _refuse(hf, layout, param)
    dim = lead + cut
    if cut != 0:
        if hf.blocks != ((0, 0, param.shape[0]),):
            raise _refuse(hf, layout, param)
        yield (*source[cut], position, target, dim)
        return
    a, b = source[0]
    for hf_row, param_row, rows in hf.blocks:
        x, y = max(a, hf_row), min(b, hf_row + rows)
        if x < y:
            at = target[dim][0] + x - a
            box = (*target[:dim], (at, at + y - x), *target[dim + 1 :])
            yield param_row + x - hf_row, param_row + y - hf_row, position, box, dim


def _merged(runs: list[_Run], tensor: list[int]) -> list[_Run]:
    """Runs in local order, adjacent ones (in the weight and in one local tensor) merged
    (``tensor``: the local tensor of each Hugging Face tensor, as the position of the first that
    loads into it)."""
    found: list[_Run] = []
    for run in sorted(runs, key=lambda r: (tensor[r[2]], r[3])):
        if found:
            lo, hi, position, box, dim = found[-1]
            if (
                tensor[position] == tensor[run[2]]
                and hi == run[0]
                and box[dim][1] == run[3][dim][0]
                and box[:dim] == run[3][:dim]
                and box[dim + 1 :] == run[3][dim + 1 :]
            ):
                grown = (*box[:dim], (box[dim][0], run[3][dim][1]), *box[dim + 1 :])
                found[-1] = (lo, run[1], position, grown, dim)
                continue
        found.append(run)
    return found


@attrs.frozen
class Signatures:
    """Engine ranks in classes by their ``(size, index)`` in some of the engine's groups, what
    :func:`holding` reads of a rank: ranks of one class hold the same of a tensor cut over those
    groups (:func:`signatures`).

    ``of_rank[r]`` is engine rank ``r``'s class (world rank ``offset + r``); ``ranks[c]`` the
    world ranks of class ``c``, ascending; classes are numbered in the order of their first rank.
    """

    offset: int
    of_rank: tuple[int, ...]
    ranks: tuple[tuple[int, ...], ...]

    def of(self, world: int) -> int | None:
        """The class of world rank ``world`` (None: not one of the engine's ranks)."""
        if not isinstance(world, int):
            return None
        rank = world - self.offset
        return self.of_rank[rank] if 0 <= rank < len(self.of_rank) else None


def signatures(layout: EngineLayout, names: Sequence[str], rank_offset: int = 0) -> Signatures:
    """``layout``'s ranks in classes by their ``(size, index)`` in each group of ``names`` (see
    :class:`Signatures`); engine rank ``r`` is world rank ``rank_offset + r``.

    >>> found = signatures(EngineLayout("vllm", tp=2, dp=3), ("dense",), rank_offset=10)
    >>> found.of_rank, found.ranks
    ((0, 1, 0, 1, 0, 1), ((10, 12, 14), (11, 13, 15)))
    """
    ranks = range(layout.world_size)
    rules = dict.fromkeys(layout.row.groups[name] for name in names)  # a rule once: same values
    columns = [[rule(layout, r) for r in ranks] for rule in rules]
    ids: dict[tuple[tuple[int, int], ...], int] = {}
    of_rank: list[int] = []
    members: list[list[int]] = []
    for rank, key in zip(ranks, zip(*columns, strict=True), strict=True):
        at = ids.setdefault(key, len(ids))
        if at == len(members):
            members.append([])
        members[at].append(rank + rank_offset)
        of_rank.append(at)
    return Signatures(rank_offset, tuple(of_rank), tuple(tuple(m) for m in members))


_Runs = tuple[tuple[int, int, int, Box, int, tuple[int, ...], str], ...]
"""A rank's runs of a weight, each with its local tensor's shape and name."""


@attrs.frozen
class _Class:
    """One class's placement (its ``param`` a stand-in), the runs and local shapes of each class
    of ranks holding some (``routed``: the classes of :attr:`EngineTarget.routed_signatures`,
    else of :attr:`EngineTarget.dense_signatures`) and the world ranks holding some, ascending."""

    placement: ParamPlacement
    routed: bool
    runs: dict[int, _Runs]
    holders: tuple[int, ...]


class EngineTarget:
    """The :class:`~topology._transfer.param_placement.Target` of an engine layout for one model
    (see the module); engine rank ``r`` is world rank ``rank_offset + r``.

    Raises:
        TopologyError: a weight the model does not list, or a cut the engine refuses or the
            planner cannot express (see the module).
    """

    def __init__(
        self,
        layout: EngineLayout,
        model: Architecture,
        *,
        rank_offset: int = 0,
        itemsize: int = 2,
    ) -> None:
        self.layout, self.model, self.rank_offset = layout, model, rank_offset
        self.itemsize = itemsize
        self._params = {param.name: param for param in weights(model, itemsize)}
        """The model's Megatron weights by name."""
        self._hf: dict[str, list[HFWeight]] = {}
        """The Hugging Face tensors of each weight asked for, by its name."""
        self._classes: dict[Hashable, _Class] = {}
        self._keys: dict[str, tuple[Hashable, ...]] = {}
        """Per weight name: the part of its class key its tensors decide."""
        self._held: dict[tuple[str, tuple[int, ...], int | None, int], Holding] = {}
        """:func:`holding` per (role, shape, expert, class of ranks)."""
        self._unions: dict[tuple[bool, tuple[int, ...]], tuple[int, ...]] = {}
        """The world ranks of some classes of ranks, ascending."""
        self._slots: dict[int, dict[int, int]] = defaultdict(dict)
        """Each expert's holders under expert parallelism: rank -> its local slot."""
        if layout.engine in PLACEMENTS and model.experts > 1:
            place, group = PLACEMENTS[layout.engine], layout.row.groups["expert_ep"]
            for rank in range(layout.world_size):
                ranks, index = group(layout, rank)
                held = place(model.experts, ranks, index, layout.placement)
                for slot, expert in enumerate(held):
                    self._slots[expert][rank + rank_offset] = slot
        self._expert_ranks = {expert: tuple(held) for expert, held in self._slots.items()}
        """Each expert's holders (world ranks, ascending) under expert parallelism."""
        self._routed: dict[str, bool] = {}
        """Per role: whether the engine's rule places it by expert parallelism."""

    @functools.cached_property
    def weights(self) -> tuple[HFWeight, ...]:
        """The model's Hugging Face tensors, in Megatron's module order."""
        return tuple(hf_weights(self.model, self.itemsize))

    @functools.cached_property
    def dense_signatures(self) -> Signatures:
        """The ranks in classes by their ``(size, index)`` in every group but ``expert_ep``:
        what :func:`holding` reads of a rank for a tensor that is not a routed expert's (a rule
        cuts over its ``group``), so ranks of one class hold the same of every such tensor."""
        names = [name for name in GROUPS if name != "expert_ep"]
        return signatures(self.layout, names, self.rank_offset)

    @functools.cached_property
    def routed_signatures(self) -> Signatures:
        """The ranks in classes by their ``(size, index)`` in every group: what :func:`holding`
        reads of a rank for a routed expert's tensor (``expert_ep`` picks its experts)."""
        return signatures(self.layout, GROUPS, self.rank_offset)

    def tensors(self, param: Param) -> list[HFWeight]:
        """The Hugging Face tensors ``param`` is made of.

        Raises:
            TopologyError: the model has no weight of ``param``'s name.
        """
        found = self._hf.get(param.name)
        if found is None:
            found = self._hf[param.name] = hf_tensors(self.model, self._own(param))
        return found

    def _own(self, param: Param) -> Param:
        """The model's weight of ``param``'s name.

        Raises:
            TopologyError: the model has none.
        """
        found = self._params.get(param.name)
        if found is None:
            raise TopologyError(
                f"the model has no weight {param.name!r}; give the weights of the model the "
                "engine target was made for (topology.weights(model))"
            )
        return found

    def key(self, param: Param, num_layers: int) -> Hashable:
        """The class of ``param``: its shape and cut dim, its tensors' roles, shapes and blocks
        (what :func:`holding` reads), and for a routed expert's weight the ranks holding the
        expert (not its slot among their experts: :meth:`landing` puts that in). Made without
        the tensors themselves (:func:`~topology._transfer.hf_weights.hf_kind`)."""
        found = self._keys.get(param.name)
        if found is None:
            own = self._own(param)
            kinds = hf_kind(self.model, own)
            found = self._keys[param.name] = (kinds, self._holding(kinds[0][0], own.expert))
        return (param.shape, param.cut_dim, *found)

    def _holders(self, param: Param, tensors: list[HFWeight]) -> tuple[int, ...] | None:
        """The world ranks holding a routed expert's weight (None: any other weight)."""
        return self._expert_holders(tensors[0])

    def routed(self, hf: HFWeight) -> bool:
        """Whether ``hf`` is a routed expert's tensor the engine places by expert parallelism
        (its holders read ``expert_ep``)."""
        return self._routes(hf.role, hf.expert)

    def _routes(self, role: str, expert: int | None) -> bool:
        """:meth:`routed` of a tensor of ``role`` of ``expert``."""
        if expert is None:
            return False
        found = self._routed.get(role)
        if found is None:
            found = self._routed[role] = rule_of(self.layout, self.model, role).expert
        return found

    def _expert_holders(self, hf: HFWeight) -> tuple[int, ...] | None:
        return self._holding(hf.role, hf.expert)

    def _holding(self, role: str, expert: int | None) -> tuple[int, ...] | None:
        """The world ranks holding a routed expert's tensor of ``role`` (None: not one)."""
        if not self._routes(role, expert):
            return None
        return self._expert_ranks.get(expert, ())  # type: ignore[arg-type]

    def rank_classes(self, hf: HFWeight) -> list[tuple[int, int, tuple[int, ...]]]:
        """The engine ranks that may hold some of ``hf`` (a routed expert's holders, else every
        rank) in classes holding the same of it: ``(class, an engine rank of it, its world
        ranks ascending)`` in the order of their first rank (the classes of
        :attr:`routed_signatures` for a routed expert's tensor, else of
        :attr:`dense_signatures`)."""
        holders = self._expert_holders(hf)
        if holders is None:
            dense = self.dense_signatures
            return [(c, r[0] - self.rank_offset, r) for c, r in enumerate(dense.ranks)]
        routed = self.routed_signatures
        found: dict[int, list[int]] = {}
        for world in holders:
            found.setdefault(routed.of_rank[world - self.rank_offset], []).append(world)
        return [(c, r[0] - self.rank_offset, tuple(r)) for c, r in found.items()]

    def held(self, hf: HFWeight, rank: int) -> Holding:
        """What engine rank ``rank`` (from 0) holds of ``hf``: :func:`holding`, computed once per
        class of ranks (:meth:`rank_classes`) and tensor role, shape and expert."""
        routed = self.routed(hf)
        classes = self.routed_signatures if routed else self.dense_signatures
        key = (hf.role, hf.shape, hf.expert, classes.of_rank[rank])
        found = self._held.get(key)
        if found is None:
            found = self._held[key] = holding(
                self.layout, hf.role, hf.shape, self.model, rank, hf.expert
            )
        return found

    def placement(self, param: Param, num_layers: int) -> ParamPlacement:
        """``param``'s shards on the engine's ranks (see the module)."""
        placement = self._class(param).placement
        return placement if placement.param == param else attrs.evolve(placement, param=param)

    def landing(self, param: Param, rank: int) -> tuple[Landing, ...]:
        """Where each run of ``param``'s shard on world rank ``rank`` sits in that rank's local
        tensors, in shard order (empty: the rank holds none of it)."""
        tensors = self.tensors(param)
        found: list[Landing] = []
        local = 0
        held = self._class(param)
        of = (self.routed_signatures if held.routed else self.dense_signatures).of(rank)
        runs = held.runs.get(of, ()) if of is not None else ()
        for lo, hi, position, box, dim, shape, local_name in runs:
            name = engine_name(tensors[position].name, local_name)
            if dim > param.cut_dim:  # a routed expert's tensor: the expert's slot on this rank
                assert param.expert is not None
                slot = self._slots[param.expert][rank]
                box = ((slot, slot + 1), *box[1:])
            found.append(Landing(local, local + hi - lo, name, shape, box, dim))
            local += hi - lo
        return tuple(found)

    def holders(self, param: Param) -> tuple[int, ...]:
        """The world ranks holding some of ``param``, ascending."""
        return self._class(param).holders

    def _class(self, param: Param) -> _Class:
        key = self.key(param, 0)
        found = self._classes.get(key)
        if found is None:
            found = self._classes[key] = self._compute(param)
        return found

    def _union(self, routed: bool, classes: Sequence[int]) -> tuple[int, ...]:
        """The world ranks of ``classes`` of ranks, ascending (one tuple per set of classes)."""
        key = (routed, tuple(sorted(classes)))
        found = self._unions.get(key)
        if found is None:
            members = (self.routed_signatures if routed else self.dense_signatures).ranks
            if len(key[1]) == 1:
                found = members[key[1][0]]
            else:
                found = tuple(sorted(r for c in key[1] for r in members[c]))
            self._unions[key] = found
        return found

    def _compute(self, param: Param) -> _Class:
        tensors = self.tensors(param)
        routed = self._holders(param, tensors) is not None
        by_ranges: dict[tuple[tuple[int, int], ...], list[int]] = {}
        runs = {}
        for of, rank, _ in self.rank_classes(tensors[0]):
            found = self._rank_runs(param, tensors, rank)
            if found is not None:
                by_ranges.setdefault(found[0], []).append(of)
                runs[of] = found[1]
        shards = tuple(
            ParamShard(index, 0, 0, self._union(routed, classes), ranges)
            for index, (ranges, classes) in enumerate(by_ranges.items())
        )
        return _Class(
            ParamPlacement(param, len(shards), shards, ()),
            routed,
            runs,
            self._union(routed, list(runs)) if runs else (),
        )

    def _rank_runs(
        self, param: Param, tensors: list[HFWeight], rank: int
    ) -> tuple[tuple[tuple[int, int], ...], _Runs] | None:
        """Engine rank ``rank``'s ranges of ``param`` and its runs with their local shapes and
        names (None: it holds none of it)."""
        layout = self.layout
        mine: list[_Run] = []
        shapes = {}
        for position, hf in enumerate(tensors):
            held = self.held(hf, rank)
            shapes[position] = (held.shape, held.param)
            for piece in held.pieces:
                mine += _runs(param, hf, position, piece, layout)
        if not mine:
            return None
        names = [engine_name(hf.name, shapes[p][1]) for p, hf in enumerate(tensors)]
        merged = _merged(mine, [names.index(name) for name in names])
        ranges = tuple((lo, hi) for lo, hi, *_ in merged)
        return ranges, tuple((*run, *shapes[run[2]]) for run in merged)
