"""Model-parallel layers equal their single-process ``torch.nn`` counterparts, forward and back.

The reference is built from one seed as plain ``nn.Linear`` / ``nn.Embedding``; each rank gets
its slices by an index formula written here (independent of ``layers.shard``), and outputs and
gradients (input and every parameter slice) must match, in fp32 and bf16, for tp = 1, 2, 4.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from tests.torch.world import run_world
from topology import TopologyError
from topology_torch.layers import (
    INIT_TYPES,
    ColumnParallelLinear,
    ParallelEmbedding,
    RowParallelLinear,
    VocabParallelEmbedding,
    initialize_model_parallel_affine_weight_,
)
from topology_torch.layers._init import shard, to_master_order, to_rank_order
from topology_torch.ops import _SingleRank

IN, OUT, VOCAB, BATCH = 16, 24, 32, (3, 5)
DTYPES = (torch.float32, torch.bfloat16)
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "broadcast",
    "all_to_all",
    "all_to_all_single",
)


def tol(dtype: torch.dtype, want: torch.Tensor) -> dict[str, float]:
    """Tolerances: fp32 tight; bf16 (8-bit mantissa, other summation order) 2% of the scale."""
    if dtype == torch.float32:
        return {"rtol": 1e-5, "atol": 1e-5}
    scale = max(1.0, float(want.detach().float().abs().max()))
    return {"rtol": 2e-2, "atol": 2e-2 * scale}


def close(got: torch.Tensor | None, want: torch.Tensor | None, dtype: torch.dtype) -> None:
    """Assert two tensors are equal within the tolerances of ``dtype`` (compared in fp32)."""
    assert got is not None and want is not None
    bounds = tol(dtype, want)
    torch.testing.assert_close(got.float(), want.float(), rtol=bounds["rtol"], atol=bounds["atol"])


def indices(total: int, size: int, rank: int, stride: int = 1) -> list[int]:
    """Master indices owned by ``rank``: chunk k of ``size * stride`` goes to rank ``k % size``."""
    chunk = total // (size * stride)
    return [i for i in range(total) if (i // chunk) % size == rank]


def seeded(seed: int, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A reproducible N(0, 1) tensor (same on every rank)."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def reference_linear(seed: int, n_in: int, n_out: int, dtype: torch.dtype) -> nn.Linear:
    """A plain ``nn.Linear`` with a random non-zero bias."""
    torch.manual_seed(seed)
    ref = nn.Linear(n_in, n_out)
    with torch.no_grad():
        ref.bias.normal_()
    return ref.to(dtype)


def sub(model: nn.Module, index: int) -> Any:
    """The ``index``-th child of a ``nn.Sequential`` (typed loosely: Linear or Embedding)."""
    assert isinstance(model, nn.Sequential)
    return model[index]


def load(param: torch.Tensor | None, value: torch.Tensor | None) -> None:
    """Copy ``value`` into ``param`` (both present)."""
    assert param is not None and value is not None
    with torch.no_grad():
        param.copy_(value)


@contextmanager
def counting() -> Iterator[Counter[str]]:
    """Count calls to the ``torch.distributed`` collectives while the block runs."""
    counts: Counter[str] = Counter()
    saved = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return fn(*args, **kwargs)

        return counted

    for name, fn in saved.items():
        setattr(dist, name, wrap(name, fn))
    try:
        yield counts
    finally:
        for name, fn in saved.items():
            setattr(dist, name, fn)


def check_column(rank: int, n: int, group: Any, dtype: torch.dtype) -> None:
    """ColumnParallelLinear equals nn.Linear for gather_output on/off, stride 1/2, bias on/off."""
    for stride in (1, 2):
        for gather in (True, False):
            for bias in (True, False):
                ref = reference_linear(11, IN, OUT, dtype)
                layer = ColumnParallelLinear(
                    IN,
                    OUT,
                    bias=bias,
                    gather_output=gather,
                    stride=stride,
                    group=group,
                    dtype=dtype,
                )
                idx = indices(OUT, n, rank, stride)
                assert layer.weight.shape == (OUT // n, IN)
                load(layer.weight, ref.weight[idx])
                if bias:
                    load(layer.bias, ref.bias[idx])
                    close(layer.master_bias, ref.bias, dtype)
                else:
                    assert layer.bias is None and layer.master_bias is None
                close(layer.master_weight, ref.weight, dtype)
                x = seeded(1, *BATCH, IN, dtype=dtype)
                g = seeded(2, *BATCH, OUT, dtype=dtype)
                x_ref, x_par = x.clone().requires_grad_(), x.clone().requires_grad_()
                want = nn.functional.linear(x_ref, ref.weight, ref.bias if bias else None)
                torch.autograd.backward((want * g).sum())
                got = layer(x_par)
                close(got, want if gather else want[..., idx], dtype)
                torch.autograd.backward((got * (g if gather else g[..., idx])).sum())
                close(x_par.grad, x_ref.grad, dtype)
                close(layer.weight.grad, ref.weight.grad[idx], dtype)  # type: ignore[index]
                if bias:
                    close(layer.bias.grad, ref.bias.grad[idx], dtype)  # type: ignore[index,union-attr]


def check_row(rank: int, n: int, group: Any, dtype: torch.dtype) -> None:
    """RowParallelLinear equals nn.Linear for input_is_parallel on/off, stride 1/2, bias on/off."""
    for stride in (1, 2):
        for parallel in (True, False):
            for bias in (True, False):
                ref = reference_linear(12, OUT, IN, dtype)
                layer = RowParallelLinear(
                    OUT,
                    IN,
                    bias=bias,
                    input_is_parallel=parallel,
                    stride=stride,
                    group=group,
                    dtype=dtype,
                )
                idx = indices(OUT, n, rank, stride)
                assert layer.weight.shape == (IN, OUT // n)
                load(layer.weight, ref.weight[:, idx])
                if bias:
                    assert layer.bias is not None and layer.bias.shape == (IN,)
                    load(layer.bias, ref.bias)
                    close(layer.master_bias, ref.bias, dtype)
                close(layer.master_weight, ref.weight, dtype)
                x = seeded(3, *BATCH, OUT, dtype=dtype)
                g = seeded(4, *BATCH, IN, dtype=dtype)
                x_ref = x.clone().requires_grad_()
                x_par = (x[..., idx] if parallel else x).clone().requires_grad_()
                want = nn.functional.linear(x_ref, ref.weight, ref.bias if bias else None)
                torch.autograd.backward((want * g).sum())
                got = layer(x_par)
                close(got, want, dtype)
                torch.autograd.backward((got * g).sum())
                assert x_ref.grad is not None
                close(x_par.grad, x_ref.grad[..., idx] if parallel else x_ref.grad, dtype)
                close(layer.weight.grad, ref.weight.grad[:, idx], dtype)  # type: ignore[index]
                if bias:
                    close(layer.bias.grad, ref.bias.grad, dtype)  # type: ignore[union-attr]


def check_embeddings(rank: int, n: int, group: Any, dtype: torch.dtype) -> None:
    """Both embeddings equal nn.Embedding, with ids on every shard boundary and a padding id."""
    part = VOCAB // n
    edges = sorted({0, VOCAB - 1} | {b for r in range(1, n) for b in (r * part - 1, r * part)})
    ids = torch.tensor(
        edges + [16, 5, 5, 17, 30, 9, 2, 2, 31, 16, 15, 8, 7, 1, 3][: 15 - len(edges)]
    )
    ids = ids[:15].reshape(*BATCH)
    g = seeded(5, *BATCH, IN, dtype=dtype)
    for cls in (ParallelEmbedding, VocabParallelEmbedding):
        for padding in (None, VOCAB // 2):
            torch.manual_seed(13)
            ref = nn.Embedding(VOCAB, IN, padding_idx=padding).to(dtype)
            layer = cls(VOCAB, IN, padding_idx=padding, group=group, dtype=dtype)
            if cls is ParallelEmbedding:
                idx = indices(IN, n, rank)
                assert layer.weight.shape == (VOCAB, IN // n)
                load(layer.weight, ref.weight[:, idx])
            else:
                idx = indices(VOCAB, n, rank)
                assert layer.weight.shape == (VOCAB // n, IN)
                load(layer.weight, ref.weight[idx])
            close(layer.master_weight, ref.weight, dtype)
            want, got = ref(ids), layer(ids)
            close(got, want, dtype)
            torch.autograd.backward((want * g).sum())
            torch.autograd.backward((got * g).sum())
            assert ref.weight.grad is not None
            wanted = ref.weight.grad[:, idx] if cls is ParallelEmbedding else ref.weight.grad[idx]
            close(layer.weight.grad, wanted, dtype)


def check_seed_model(rank: int, n: int, group: Any, dtype: torch.dtype) -> None:
    """Seed 001's embedding -> column(no gather) -> row(parallel input) equals nn.Sequential."""
    for embedding_cls in (ParallelEmbedding, VocabParallelEmbedding):
        torch.manual_seed(21)
        ref = nn.Sequential(nn.Embedding(VOCAB, IN), nn.Linear(IN, OUT), nn.Linear(OUT, OUT))
        with torch.no_grad():
            sub(ref, 1).bias.normal_()
            sub(ref, 2).bias.normal_()
        ref = ref.to(dtype)
        emb = embedding_cls(VOCAB, IN, group=group, dtype=dtype)
        col = ColumnParallelLinear(IN, OUT, gather_output=False, group=group, dtype=dtype)
        row = RowParallelLinear(OUT, OUT, input_is_parallel=True, group=group, dtype=dtype)
        e_idx, v_idx, o_idx = indices(IN, n, rank), indices(VOCAB, n, rank), indices(OUT, n, rank)
        is_vocab = embedding_cls is VocabParallelEmbedding
        load(emb.weight, sub(ref, 0).weight[v_idx] if is_vocab else sub(ref, 0).weight[:, e_idx])
        load(col.weight, sub(ref, 1).weight[o_idx])
        load(col.bias, sub(ref, 1).bias[o_idx])
        load(row.weight, sub(ref, 2).weight[:, o_idx])
        load(row.bias, sub(ref, 2).bias)
        ids = torch.randint(0, VOCAB, BATCH, generator=torch.Generator().manual_seed(3))
        g = seeded(6, *BATCH, OUT, dtype=dtype)
        want, got = ref(ids), row(col(emb(ids)))
        close(got, want, dtype)
        torch.autograd.backward((want * g).sum())
        torch.autograd.backward((got * g).sum())
        grads = [p.grad for p in ref.parameters()]
        assert all(grad is not None for grad in grads)
        close(emb.weight.grad, grads[0][v_idx] if is_vocab else grads[0][:, e_idx], dtype)  # type: ignore[index]
        close(col.weight.grad, grads[1][o_idx], dtype)  # type: ignore[index]
        close(col.bias.grad, grads[2][o_idx], dtype)  # type: ignore[index,union-attr]
        close(row.weight.grad, grads[3][:, o_idx], dtype)  # type: ignore[index]
        close(row.bias.grad, grads[4], dtype)  # type: ignore[union-attr]


def check_lora(rank: int, n: int, group: Any, dtype: torch.dtype) -> None:
    """LoRA starts as a no-op; with non-zero B both layers equal x (W + B A)ᵀ + b, grads too."""
    r = 3
    for kind in ("column", "row"):
        for stride in (1, 2):
            torch.manual_seed(31)
            layer: nn.Module
            if kind == "column":
                layer = ColumnParallelLinear(
                    IN,
                    OUT,
                    gather_output=False,
                    stride=stride,
                    lora_rank=r,
                    group=group,
                    dtype=dtype,
                )
            else:
                layer = RowParallelLinear(
                    IN,
                    OUT,
                    input_is_parallel=True,
                    stride=stride,
                    lora_rank=r,
                    group=group,
                    dtype=dtype,
                )
            assert layer.lora_a is not None and layer.lora_b is not None
            assert not layer.lora_b.detach().any()
            w = seeded(40, OUT, IN, dtype=dtype).requires_grad_()
            b = seeded(41, OUT, dtype=dtype).requires_grad_()
            a = seeded(42, r, IN, dtype=dtype).requires_grad_()
            bb = seeded(43, OUT, r, dtype=dtype).requires_grad_()
            x = seeded(44, *BATCH, IN, dtype=dtype).requires_grad_()
            g = seeded(45, *BATCH, OUT, dtype=dtype)
            if kind == "column":
                idx = indices(OUT, n, rank, stride)
                base = nn.functional.linear(x, w[idx], b[idx])
                assert layer.lora_a.shape == (r, IN) and layer.lora_b.shape == (OUT // n, r)
                for param, value in (
                    (layer.weight, w[idx]),
                    (layer.bias, b[idx]),
                    (layer.lora_a, a),
                ):
                    load(param, value)
            else:
                idx = indices(IN, n, rank, stride)
                base = nn.functional.linear(x, w, b)
                assert layer.lora_a.shape == (r, IN // n) and layer.lora_b.shape == (OUT, r)
                for param, value in (
                    (layer.weight, w[:, idx]),
                    (layer.bias, b),
                    (layer.lora_a, a[:, idx]),
                ):
                    load(param, value)
            x_par = (x if kind == "column" else x[..., idx]).detach().clone().requires_grad_()
            close(layer(x_par), base, dtype)  # B is zero: no-op
            load(layer.lora_b, bb[idx] if kind == "column" else bb)
            want = nn.functional.linear(x, w + bb @ a, b)
            torch.autograd.backward((want * g).sum())
            got = layer(x_par)
            out_idx = idx if kind == "column" else slice(None)
            close(got, want[..., out_idx], dtype)
            x_par.grad = None
            torch.autograd.backward((got * g[..., out_idx]).sum())
            assert x.grad is not None and a.grad is not None and bb.grad is not None
            close(x_par.grad, x.grad if kind == "column" else x.grad[..., idx], dtype)
            if kind == "column":
                close(layer.lora_a.grad, a.grad, dtype)
                close(layer.lora_b.grad, bb.grad[idx], dtype)
            else:
                close(layer.lora_a.grad, a.grad[:, idx], dtype)
                close(layer.lora_b.grad, bb.grad, dtype)


def check_init(rank: int, n: int, group: Any) -> None:
    """Every init type: the gathered master equals the same init of a full tensor from one seed."""
    for init_type in INIT_TYPES:
        for stride in (1, 2):
            torch.manual_seed(50)
            col = ColumnParallelLinear(IN, OUT, init_type=init_type, stride=stride, group=group)
            torch.manual_seed(50)
            row = RowParallelLinear(OUT, IN, init_type=init_type, stride=stride, group=group)
            for layer, shape in ((col, (OUT, IN)), (row, (IN, OUT))):
                torch.manual_seed(50)
                want = torch.empty(shape)
                _reference_init(want, init_type)
                close(layer.master_weight, want, torch.float32)
            bias = col.master_bias
            assert bias is not None
            assert bias.any() == (init_type == "biased_normal")


def _reference_init(t: torch.Tensor, init_type: str) -> None:
    """The documented meaning of each init type, applied to a full tensor."""
    fan_in = t.shape[1]
    table: dict[str, Callable[[], Any]] = {
        "orthogonal": lambda: nn.init.orthogonal_(t),
        "normal": lambda: t.normal_(0, 0.02),
        "biased_normal": lambda: t.normal_(0, 0.02),
        "uniform": lambda: t.uniform_(-(fan_in**-0.5), fan_in**-0.5),
        "kaiming_uniform": lambda: nn.init.kaiming_uniform_(t),
        "kaiming_normal": lambda: nn.init.kaiming_normal_(t),
        "xavier_uniform": lambda: nn.init.xavier_uniform_(t),
        "xavier_normal": lambda: nn.init.xavier_normal_(t),
        "trunc_normal": lambda: nn.init.trunc_normal_(t, std=0.02, a=-0.04, b=0.04),
        "dirac": lambda: t.copy_(torch.eye(*t.shape)),
        "constant": lambda: t.fill_(0.1),
        "zeros": lambda: t.zero_(),
        "ones": lambda: t.fill_(1.0),
    }
    with torch.no_grad():
        table[init_type]()


def check_collectives(rank: int, n: int, group: Any) -> None:
    """Without sequence parallelism: one all-reduce per row forward and per column backward."""
    col = ColumnParallelLinear(IN, OUT, gather_output=False, group=group)
    row = RowParallelLinear(OUT, IN, input_is_parallel=True, group=group)
    x = seeded(60, *BATCH, IN).requires_grad_()
    with counting() as fwd_col:
        h = col(x)
    with counting() as fwd_row:
        y = row(h)
    with counting() as bwd:
        torch.autograd.backward(y.sum())
    expected = Counter({"all_reduce": 1}) if n > 1 else Counter()
    assert fwd_col == Counter(), fwd_col
    assert fwd_row == expected, fwd_row
    assert bwd == expected, bwd


def check_dtensor(rank: int, n: int, group: Any) -> None:
    """The column/row pair equals torch's ColwiseParallel/RowwiseParallel on the same weights."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    torch.manual_seed(70)
    ref = nn.Sequential(nn.Linear(IN, OUT), nn.GELU(), nn.Linear(OUT, IN))
    with torch.no_grad():
        for module in (sub(ref, 0), sub(ref, 2)):
            module.bias.normal_()
    col = ColumnParallelLinear(IN, OUT, gather_output=False, group=group)
    row = RowParallelLinear(OUT, IN, input_is_parallel=True, group=group)
    idx = indices(OUT, n, rank)
    load(col.weight, sub(ref, 0).weight[idx])
    load(col.bias, sub(ref, 0).bias[idx])
    load(row.weight, sub(ref, 2).weight[:, idx])
    load(row.bias, sub(ref, 2).bias)
    mesh = init_device_mesh("cpu", (n,))
    torch_tp = parallelize_module(ref, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x = seeded(71, *BATCH, IN)
    want = torch_tp(x)
    got = row(nn.functional.gelu(col(x)))
    close(got, want, torch.float32)


def _world(rank: int, n: int) -> None:
    group = dist.new_group(list(range(n)))
    _all_checks(rank, n, group)
    check_dtensor(rank, n, group)


def _all_checks(rank: int, n: int, group: Any) -> None:
    for dtype in DTYPES:
        check_column(rank, n, group, dtype)
        check_row(rank, n, group, dtype)
        check_embeddings(rank, n, group, dtype)
        check_seed_model(rank, n, group, dtype)
        check_lora(rank, n, group, dtype)
    check_init(rank, n, group)
    check_collectives(rank, n, group)


def test_layers_equal_torch_nn_at_tp1() -> None:
    """At tp = 1 (a one-rank group, no torch.distributed) every layer equals torch.nn."""
    _all_checks(0, 1, _SingleRank())


@pytest.mark.parametrize("n", [2, 4])
def test_layers_equal_torch_nn(n: int) -> None:
    """At tp = 2 and 4 every layer equals torch.nn and torch's own tensor parallelism."""
    run_world(n, _world)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (
            lambda g: ColumnParallelLinear(16, 7, stride=2, group=g),
            r"out_features\(7\) must be divisible by stride\(2\) \* tp\(1\) = 2, but 7 % 2 = 1",
        ),
        (
            lambda g: ColumnParallelLinear(16, 8, init_type="glorot", group=g),  # type: ignore[arg-type]
            r"init_type\('glorot'\) is not an initialisation type; use one of orthogonal",
        ),
        (
            lambda g: ColumnParallelLinear(16, 8, lora_rank=0, group=g),
            r"lora_rank must be a positive int, got 0 \(int\)",
        ),
        (
            lambda g: ColumnParallelLinear(16, 8, sequence_parallel=True, group=g),
            r"gather_output=True with sequence_parallel=True",
        ),
        (
            lambda g: RowParallelLinear(16, 8, sequence_parallel=True, group=g),
            r"sequence_parallel=True needs input_is_parallel=True",
        ),
        (
            lambda g: ParallelEmbedding(10, 4, padding_idx=10, group=g),
            r"padding_idx\(10\) must be an int in \[-10, 9\]",
        ),
        (
            lambda g: VocabParallelEmbedding(0, 4, group=g),
            r"num_embeddings must be a positive int, got 0",
        ),
    ],
)
def test_invalid_arguments_raise(build: Callable[[Any], Any], match: str) -> None:
    """Invalid layer arguments raise TopologyError naming the argument and the arithmetic."""
    with pytest.raises(TopologyError, match=match):
        build(_SingleRank())


@given(
    size=st.sampled_from([1, 2, 3, 4]),
    stride=st.sampled_from([1, 2, 3]),
    chunk=st.integers(1, 3),
    dim=st.sampled_from([0, 1]),
)
@settings(max_examples=60, deadline=None)
def test_strided_shards_partition_the_master(size: int, stride: int, chunk: int, dim: int) -> None:
    """Law: the strided shards partition the master by the index formula, and reorder inverts."""
    total = size * stride * chunk
    master = torch.arange(total * 2).reshape((2, total) if dim == 1 else (total, 2))
    pieces = [shard(master, dim, size, r, stride) for r in range(size)]
    for r, piece in enumerate(pieces):
        assert torch.equal(
            piece, master.index_select(dim, torch.tensor(indices(total, size, r, stride)))
        )
    ranked = to_rank_order(master, dim, size, stride)
    assert torch.equal(ranked, torch.cat(pieces, dim))
    assert torch.equal(to_master_order(ranked, dim, size, stride), master)


# -- only TopologyError escapes, whatever the constructor arguments (Hypothesis) -----------


def fuzz_fields() -> dict[str, st.SearchStrategy[Any]]:
    """Per argument: mostly valid values, one time in eight a value of any other type."""
    from tests.torch.test_ops import ANYTHING, one_rank_groups

    def mostly(*valid: Any) -> st.SearchStrategy[Any]:
        return st.integers(0, 7).flatmap(lambda k: ANYTHING if k == 0 else st.sampled_from(valid))

    return {
        "size": mostly(1, 2, 4, 8),
        "flag": mostly(True, False),
        "init_type": mostly(*INIT_TYPES),
        "stride": mostly(1, 2),
        "lora_rank": mostly(None, 1, 3),
        "padding_idx": mostly(None, 0, -1, 3),
        "sequence_dim": mostly(0, 1, -1),
        "device": mostly(None, "cpu", torch.device("cpu"), "meta"),
        "dtype": mostly(None, torch.float32, torch.bfloat16),
        "group": mostly(*one_rank_groups()),
        "ids": mostly(torch.tensor([0, 3]), torch.tensor([[1], [8]]), torch.tensor([0.5])),
        "weight": mostly(torch.empty(4, 2), torch.empty(2, 4)),
        "partition_dim": mostly(0, 1),
    }


LAYER_ARGS = {  # the arguments of each layer beyond (size, size) and the shared ones below
    ColumnParallelLinear: {
        "bias": "flag",
        "gather_output": "flag",
        "stride": "stride",
        "lora_rank": "lora_rank",
    },
    RowParallelLinear: {
        "bias": "flag",
        "input_is_parallel": "flag",
        "stride": "stride",
        "lora_rank": "lora_rank",
    },
    ParallelEmbedding: {"padding_idx": "padding_idx", "scale_grad_by_freq": "flag"},
    VocabParallelEmbedding: {"padding_idx": "padding_idx"},
}
SHARED_ARGS = {
    "init_type": "init_type",
    "group": "group",
    "sequence_parallel": "flag",
    "sequence_dim": "sequence_dim",
    "device": "device",
    "dtype": "dtype",
}


@settings(max_examples=150, deadline=None, database=None)
@given(st.data())
def _fuzz_layers(data: st.DataObject) -> None:
    """Every layer constructor (and embedding forward) raises only TopologyError for any input."""
    from tests.torch.test_ops import only_topology_errors

    f = fuzz_fields()
    cls = data.draw(st.sampled_from(list(LAYER_ARGS)), label="layer")
    sizes = [data.draw(f["size"], label=f"size {i}") for i in range(2)]
    args = {**SHARED_ARGS, **LAYER_ARGS[cls]}
    kw = {name: data.draw(f[field], label=name) for name, field in args.items()}
    layer = only_topology_errors(cls, *sizes, **kw)
    embeds = isinstance(layer, (ParallelEmbedding, VocabParallelEmbedding))
    if embeds and layer.weight.device.type != "meta":
        only_topology_errors(layer, data.draw(f["ids"], label="ids"))
    fields = ("weight", "size", "size", "size", "partition_dim", "init_type", "stride", "group")
    values = [data.draw(f[field], label=f"init arg {i}") for i, field in enumerate(fields)]
    only_topology_errors(initialize_model_parallel_affine_weight_, *values)


def _fuzz_world(rank: int, n: int) -> None:
    from tests.torch.test_ops import with_one_rank_default

    with_one_rank_default(_fuzz_layers)


def test_constructors_raise_only_topology_error_for_any_arguments() -> None:
    """On a one-rank world every layer constructor, fed any types, raises only TopologyError."""
    run_world(1, _fuzz_world)
