"""A trainer model built with our layers moves its weights into a generation model built with our
layers at another layout, on one spawned gloo world of 8 ranks.

Each rank builds, per layout, only the layers of its pipeline stage and virtual chunks (Megatron's
chunk-major layer order) and only its experts (``num_experts / ep`` consecutive ones from its ep
group's rank), cut by its own tp / etp group; every module draws its master from a seed of its
name. The generation model is built with another seed and then filled with NaN. After
:func:`topology.transfer` and :func:`topology_torch.transfer.execute`, every generation tensor must
equal, bit for bit, the same layer built at the generation layout with the trainer's seeds: the
slice of the trainer's master that our layers themselves cut. During ``execute`` every collective
raises and each rank's isend / irecv (peer, elements) must be exactly the plan's.

Pairs (4 layers, 4 experts): colocated tp2 pp2 vpp2 ep2 etp2 -> tp4 pp2 ep4; disjoint tp2 pp2
vpp2 ep2 on ranks 0-3 -> pp4 on ranks 4-7; colocated tp4 ep4 -> tp2 pp2 vpp2 ep2 (order
tp-cp-ep-pp-dp).
"""

from __future__ import annotations

import contextlib
import zlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tests.torch.world import run_world  # noqa: E402
from topology import Param, Topology, TopologyError, transfer  # noqa: E402

LAYERS, H, FFN, VOCAB, EXPERTS = 4, 8, 8, 16, 4
TRAINER_SEED, GENERATOR_SEED = 1000, 2000
PAIRS = [
    (Topology(8, tp=2, pp=2, vpp=2, ep=2, etp=2), Topology(8, tp=4, pp=2, ep=4, etp=1)),
    (Topology(4, tp=2, pp=2, vpp=2, ep=2, etp=1), Topology(4, pp=4, rank_offset=4)),
    (
        Topology(8, tp=4, ep=4, etp=1),
        Topology(8, tp=2, pp=2, vpp=2, ep=2, etp=1, order="tp-cp-ep-pp-dp"),
    ),
]


def _params() -> list[Param]:
    """Every weight of the model, written out by hand (fp32: 4 bytes)."""

    def p(name: str, shape: tuple[int, ...], sharding: str = "replicated", **kw: Any) -> Param:
        return Param(name, shape, 4, sharding, **kw)

    found = [
        p("embed.weight", (VOCAB, H), "vocab", position="tied"),
        p("pos.weight", (VOCAB, H), "row"),
    ]
    for layer in range(LAYERS):
        at = {"layer": layer}
        found += [
            p(f"{layer}.qkv.weight", (3 * H, H), "column", parts=(H, H, H), **at),
            p(f"{layer}.qkv.bias", (3 * H,), "column", parts=(H, H, H), **at),
            p(f"{layer}.proj.weight", (H, H), "row", **at),
            p(f"{layer}.proj.bias", (H,), **at),
            p(f"{layer}.norm.weight", (H,), **at),
            p(f"{layer}.norm.bias", (H,), **at),
        ]
        for e in range(EXPERTS):
            ex = {**at, "expert": e, "num_experts": EXPERTS}
            gate_up = {**ex, "parts": (FFN, FFN)}
            found += [
                p(f"{layer}.e{e}.fc1.weight", (2 * FFN, H), "expert-column", **gate_up),
                p(f"{layer}.e{e}.fc1.bias", (2 * FFN,), "expert-column", **gate_up),
                p(f"{layer}.e{e}.fc2.weight", (H, FFN), "expert-row", **ex),
                p(f"{layer}.e{e}.fc2.bias", (H,), "expert-replicated", **ex),
            ]
    last = {"position": "last"}
    found += [
        p("final.weight", (H,), **last),
        p("final.bias", (H,), **last),
        p("out.weight", (VOCAB, H), "column", **last),
    ]
    return found


def _norm() -> Any:
    norm = torch.nn.LayerNorm(H)
    with torch.no_grad():
        for weight in norm.parameters():
            weight.normal_()
    return norm


def _model(topo: Topology, groups: Any, rank: int, seed: int) -> dict[str, Any]:
    """This rank's modules of the model at ``topo``, each ``name: (module, placement)``."""
    from topology_torch.layers import (
        ColumnParallelLinear,
        ParallelEmbedding,
        RowParallelLinear,
        VocabParallelEmbedding,
    )
    from topology_torch.ops import group_rank, group_size

    if not topo.rank_offset <= rank < topo.rank_offset + topo.world_size:
        return {}
    tp, etp = groups.group("tp"), groups.group("etp")
    pp, stage = group_size(groups.group("pp")), group_rank(groups.group("pp"))
    ep, ep_rank = group_size(groups.group("ep")), group_rank(groups.group("ep"))
    vpp = topo.vpp or 1
    model: dict[str, Any] = {}

    def add(name: str, where: dict[str, Any], make: Any) -> None:
        torch.manual_seed(seed + zlib.crc32(name.encode()))
        model[name] = (make(), where)

    def linear(cls: Any, n_in: int, n_out: int, group: Any, **kw: Any) -> Any:
        return lambda: cls(n_in, n_out, init_type="biased_normal", group=group, **kw)

    if stage == 0:
        add("embed", {"position": "tied"}, lambda: VocabParallelEmbedding(VOCAB, H, group=tp))
        add("pos", {}, lambda: ParallelEmbedding(VOCAB, H, group=tp))
    per = LAYERS // (pp * vpp)
    for chunk in range(vpp):
        first = (chunk * pp + stage) * per  # Megatron's chunk-major model chunks
        for layer in range(first, first + per):
            at = {"layer": layer}
            add(f"{layer}.qkv", at, linear(ColumnParallelLinear, H, 3 * H, tp, stride=3))
            add(f"{layer}.proj", at, linear(RowParallelLinear, H, H, tp, input_is_parallel=True))
            add(f"{layer}.norm", at, _norm)
            local = EXPERTS // ep
            for e in range(ep_rank * local, (ep_rank + 1) * local):
                ex = {**at, "expert": e, "num_experts": EXPERTS}
                fc1 = linear(ColumnParallelLinear, H, 2 * FFN, etp, stride=2)
                add(f"{layer}.e{e}.fc1", ex, fc1)
                add(f"{layer}.e{e}.fc2", ex, linear(RowParallelLinear, FFN, H, etp))
    if stage == pp - 1:
        add("embed", {"position": "tied"}, lambda: VocabParallelEmbedding(VOCAB, H, group=tp))
        add("final", {"position": "last"}, _norm)
        add("out", {"position": "last"}, linear(ColumnParallelLinear, H, VOCAB, tp, bias=False))
    return model


COLLECTIVES = (
    "all_gather",
    "all_gather_coalesced",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_reduce",
    "all_reduce_coalesced",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "gather",
    "gather_object",
    "monitored_barrier",
    "new_group",
    "new_subgroups",
    "recv",
    "recv_object_list",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "scatter_object_list",
    "send",
    "send_object_list",
    "split_group",
)
"""Everything of ``torch.distributed`` that moves data or makes groups, but isend / irecv."""


@contextlib.contextmanager
def _only_p2p(seen: Counter[tuple[str, int, int]]) -> Iterator[None]:
    """Every collective raises; each isend / irecv adds ``(kind, peer, elements)`` to ``seen``."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    def forbidden(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"execute called torch.distributed.{name}")

        return call

    def counted(kind: str, original: Any) -> Any:
        def call(tensor: Any, dst: Any = None, *args: Any, **kwargs: Any) -> Any:
            peer = kwargs.get("group_dst", kwargs.get("group_src", dst))
            seen[kind, peer, tensor.numel()] += 1
            return original(tensor, dst, *args, **kwargs)

        return call

    patches = {name: forbidden(name) for name in COLLECTIVES}
    patches["isend"] = counted("send", c10d.isend)
    patches["irecv"] = counted("recv", c10d.irecv)
    saved = {(m, n): getattr(m, n) for m in (dist, c10d) for n in patches}
    try:
        for module, name in saved:
            setattr(module, name, patches[name])
        yield
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)


def _elements(op: Any) -> int:
    return (op.stop - op.start) * op.param.row_bytes // op.param.itemsize


def _move(rank: int, src: Topology, dst: Topology, params: list[Param]) -> None:
    from topology_torch import ProcessGroups
    from topology_torch.transfer import execute, shards_of

    kinds = ("tp", "pp", "ep", "etp")
    src_groups = ProcessGroups.create(src, kinds=kinds, gloo=())
    dst_groups = ProcessGroups.create(dst, kinds=kinds, gloo=())
    try:
        trainer = _model(src, src_groups, rank, TRAINER_SEED)
        generator = _model(dst, dst_groups, rank, GENERATOR_SEED)
        want = _model(dst, dst_groups, rank, TRAINER_SEED)
        mine, sent = shards_of(src, rank, trainer, num_layers=LAYERS)
        got_params, got = shards_of(dst, rank, generator, num_layers=LAYERS)
        assert set(mine) | set(got_params) <= set(params)
        assert bool(got) == (dst.rank_offset <= rank < dst.rank_offset + dst.world_size)
        with torch.no_grad():
            for tensor in got.values():
                tensor.fill_(float("nan"))
        plan = transfer(src, dst, params, num_layers=LAYERS)
        seen: Counter[tuple[str, int, int]] = Counter()
        with _only_p2p(seen):
            count = execute(plan, rank, sent, got)
        planned = Counter(("send", op.dst, _elements(op)) for op in plan.sends(rank))
        planned.update(("recv", op.src, _elements(op)) for op in plan.recvs(rank))
        assert seen == planned and count == sum(planned.values()), (str(src), str(dst))
        _, expected = shards_of(dst, rank, want, num_layers=LAYERS)
        assert got.keys() == expected.keys()
        for name, tensor in expected.items():
            assert torch.equal(got[name], tensor), (str(src), str(dst), name)
        if src == PAIRS[0][0]:
            _check_refusals(rank, src, src_groups)
    finally:
        src_groups.destroy()
        dst_groups.destroy()


def _check_refusals(rank: int, topo: Topology, groups: Any) -> None:
    """A layer cut by a group of the right size but the wrong ranks is refused."""
    from topology_torch.layers import ColumnParallelLinear
    from topology_torch.ops import group_rank
    from topology_torch.transfer import shards_of

    layer = topo.layers(topo.stage(rank), LAYERS)[0][0]
    wrong = groups.group("pp")  # as large as tp (2), other ranks
    if group_rank(wrong) == group_rank(groups.group("tp")):
        return
    fc = ColumnParallelLinear(H, 2 * H, group=wrong)
    with pytest.raises(TopologyError, match=r"is tp shard \d of its group but .* gives rank"):
        shards_of(topo, rank, {"fc": (fc, {"layer": layer})}, num_layers=LAYERS)


def _run(rank: int, world: int) -> None:
    params = _params()
    for src, dst in PAIRS:
        _move(rank, src, dst, params)


def test_a_trainer_model_moves_into_a_generation_model_exactly_with_only_the_plan() -> None:
    """Every generation shard equals its slice of the trainer's master; only the plan's p2p ran."""
    run_world(8, _run)
