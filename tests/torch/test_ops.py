"""The autograd collectives of ``topology_torch.ops`` on real gloo worlds, against local formulas.

Every rank can rebuild every other rank's input (``_tensor(seed)``), so each forward and backward
is checked against a single-process formula: sums, concatenations and slices of those tensors.
"""

from __future__ import annotations

import fractions
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.torch.world import run_world
from topology import Topology, TopologyError
from topology_torch import ops

SHAPE = (4, 8, 12)  # every dim divisible by 1, 2 and 4
DIMS = (0, 1, 2, -1, -2)


def _tensor(seed: int, shape: tuple[int, ...] = SHAPE) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=torch.float64)


def _run(
    fn: Callable[..., torch.Tensor], x: torch.Tensor, grad: torch.Tensor, **kw: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.clone().requires_grad_(True)
    out = fn(x, **kw)
    torch.autograd.backward(out, grad)
    assert x.grad is not None
    return out.detach(), x.grad


def _check_pairs(rank: int, n: int, group: Any) -> None:
    """Forward and backward of every op against sums, concatenations and slices."""
    xs = [_tensor(100 + r) for r in range(n)]
    total = sum(xs[1:], xs[0])
    x, shared = xs[rank], _tensor(7)
    for dim in DIMS:
        d = dim % len(SHAPE)
        part = SHAPE[d] // n
        mine = (d, rank * part, part)
        gs = [_tensor(200 + r) for r in range(n)]
        small = [
            _tensor(300 + r, tuple(part if i == d else s for i, s in enumerate(SHAPE)))
            for r in range(n)
        ]

        ups = [_tensor(400 + r) for r in range(n)]
        out, grad = _run(ops.mp_copy, x, ups[rank], group=group)
        torch.testing.assert_close(out, x)
        torch.testing.assert_close(grad, sum(ups[1:], ups[0]))

        out, grad = _run(ops.mp_reduce, x, xs[(rank + 1) % n], group=group)
        torch.testing.assert_close(out, total)
        torch.testing.assert_close(grad, xs[(rank + 1) % n])

        out, grad = _run(ops.mp_scatter, shared, small[rank], dim=dim, group=group)
        torch.testing.assert_close(out, shared.narrow(*mine))
        torch.testing.assert_close(grad, torch.cat(small, d))

        out, grad = _run(ops.mp_gather, small[rank], gs[rank], dim=dim, group=group)
        torch.testing.assert_close(out, torch.cat(small, d))
        torch.testing.assert_close(grad, gs[rank].narrow(d, rank * part, part))

        out, grad = _run(ops.sp_gather, small[rank], gs[rank], dim=dim, group=group)
        torch.testing.assert_close(out, torch.cat(small, d))
        torch.testing.assert_close(grad, sum(gs[1:], gs[0]).narrow(d, rank * part, part))

        out, grad = _run(ops.sp_scatter, x, small[rank], dim=dim, group=group)
        torch.testing.assert_close(out, total.narrow(*mine))
        torch.testing.assert_close(grad, torch.cat(small, d))


def _check_adjoint(rank: int, n: int, group: Any) -> None:
    """Law: backward is the adjoint of forward, <f(x), g> == <x, f*(g)> summed over the ranks.

    A replicated side (the same tensor on every rank) is one logical tensor, so its per-rank
    products are counted once (weight 1/n).
    """
    cases = [  # op, kwargs, input replicated, output replicated
        (ops.mp_copy, {}, True, False),
        (ops.mp_reduce, {}, False, True),
        (ops.mp_scatter, {"dim": 1}, True, False),
        (ops.mp_gather, {"dim": 2}, False, True),
        (ops.sp_gather, {"dim": 1}, False, False),
        (ops.sp_scatter, {"dim": 0}, False, False),
    ]
    for index, (fn, kw, x_rep, out_rep) in enumerate(cases):
        x = _tensor(1000 * index + (0 if x_rep else 1 + rank)).requires_grad_(True)
        out = fn(x, group=group, **kw)
        g = _tensor(1000 * index + 500 + (0 if out_rep else 1 + rank), tuple(out.shape))
        torch.autograd.backward(out, g)
        assert x.grad is not None
        lhs = (out.detach() * g).sum() / (n if out_rep else 1)
        rhs = (x.detach() * x.grad).sum() / (n if x_rep else 1)
        both = torch.stack([lhs, rhs])
        dist.all_reduce(both, group=group)
        torch.testing.assert_close(both[0], both[1])


def _check_singletons(rank: int, n: int) -> None:
    """Law: on a group of one rank every op returns its input object (no copy, no collective)."""
    singles = [dist.new_group([r]) for r in range(n)]
    mine = singles[rank]
    x = _tensor(rank)
    for fn in (ops.mp_copy, ops.mp_reduce):
        assert fn(x, group=mine) is x
    split: tuple[Callable[..., torch.Tensor], ...] = (
        ops.mp_scatter,
        ops.mp_gather,
        ops.sp_gather,
        ops.sp_scatter,
    )
    for fn in split:
        assert fn(x, dim=1, group=mine) is x


def _check_errors(rank: int, n: int, group: Any) -> None:
    """Indivisible sizes and out-of-range dims raise TopologyError naming the arithmetic."""
    odd = torch.ones(3, n * 2 + 1)
    with pytest.raises(TopologyError, match=rf"x.shape\[1\]\({2 * n + 1}\) divisible by the"):
        ops.mp_scatter(odd, dim=1, group=group)
    with pytest.raises(TopologyError, match=r"sp_scatter needs x.shape\[1\]"):
        ops.sp_scatter(odd, dim=1, group=group)
    with pytest.raises(TopologyError, match=r"dim\(3\) is out of range for a 2-d tensor"):
        ops.mp_gather(odd, dim=3, group=group)


def _check_default_group(rank: int, n: int) -> None:
    """group=None resolves to the initialized default's tp group."""
    import topology_torch

    with pytest.raises(TopologyError, match="not initialized"):
        ops.mp_reduce(torch.ones(2))
    topology_torch.initialize(Topology(world_size=n, tp=n // 2, dp=2))
    try:
        out = ops.mp_reduce(torch.full((2,), float(rank)))
        tp_ranks = topology_torch.current().ranks("tp")
        assert out.tolist() == [float(sum(tp_ranks))] * 2
        assert ops.group_size() == n // 2
    finally:
        topology_torch.destroy()


def _world(rank: int, n: int) -> None:
    group = dist.new_group(list(range(n)))
    _check_pairs(rank, n, group)
    _check_adjoint(rank, n, group)
    _check_singletons(rank, n)
    _check_errors(rank, n, group)
    if n == 4:
        _check_default_group(rank, n)


@pytest.mark.parametrize("n", [2, 4])
def test_ops_match_local_formulas(n: int) -> None:
    """Each op's forward and backward equal sums/concatenations/slices computed locally."""
    run_world(n, _world)


def test_ops_are_identity_without_distributed() -> None:
    """Without an initialized world a size-1 stand-in group makes every op the identity."""
    x = torch.ones(2, 4)
    one = ops._SingleRank()
    assert ops.mp_copy(x, group=one) is x
    assert ops.mp_scatter(x, dim=0, group=one) is x
    assert ops.group_size(one) == 1 and ops.group_rank(one) == 0


# -- wrongly typed arguments -----------------------------------------------------------------


def _check_group_types(rank: int, n: int) -> None:
    """A ProcessGroups or a non-member marker as group= raise TopologyError saying what to pass."""
    import topology_torch

    groups = topology_torch.initialize(Topology(n, tp=n))
    try:
        x = torch.ones(2, 2 * n)
        with pytest.raises(
            TopologyError, match=r"pass one of its groups, e.g. groups.group\('tp'\)"
        ):
            ops.mp_scatter(x, group=groups)
        with pytest.raises(TopologyError, match=r"group is a ProcessGroups"):
            ops.mp_reduce(x, group=groups)
        outside = dist.new_group([0])  # every rank calls new_group; rank 1 gets torch's marker
        if rank == 1:
            with pytest.raises(TopologyError, match=r"group\(-100\) is torch's marker for a group"):
                ops.mp_gather(x, group=outside)
        out = ops.mp_scatter(x, group=groups.group("tp"))  # the fix the message names works
        assert out.shape == (2, 2)
    finally:
        topology_torch.destroy()


def test_wrong_group_objects_raise_topology_error() -> None:
    """mp_scatter(group=<ProcessGroups>) and a non-member group raise TopologyError (2 ranks)."""
    run_world(2, _check_group_types)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda x, g: ops.mp_scatter(x, dim="1", group=g),
            r"dim\('1'\) has type str; pass a tensor dim",
        ),
        (lambda x, g: ops.mp_gather(x, dim=True, group=g), r"dim\(True\) has type bool"),
        (lambda x, g: ops.sp_gather(x, dim=1.0, group=g), r"dim\(1.0\) has type float"),
        (lambda x, g: ops.mp_reduce(x, op="sum", group=g), r"op\('sum'\) has type str; pass e.g. "),
        (lambda x, g: ops.mp_copy(x, op=0, group=g), r"mp_copy needs op to be a torch.distributed"),
        (lambda x, g: ops.mp_copy([1.0], group=g), r"x\(\[1.0\]\) has type list; pass a tensor"),
        (
            lambda x, g: ops.mp_gather(x, group="tp"),
            r"group\('tp'\) has type str, not a torch process",
        ),
        (lambda x, g: ops.group_size(3), r"group\(3\) has type int, not a torch process group"),
    ],
)
def test_wrongly_typed_arguments_raise_topology_error(
    call: Callable[[torch.Tensor, Any], Any], match: str
) -> None:
    """dim=, op=, x= and group= of the wrong type raise TopologyError saying what to pass."""
    with pytest.raises(TopologyError, match=match):
        call(torch.ones(2, 4), ops._SingleRank())


# -- only TopologyError escapes, whatever the arguments (Hypothesis) ----------------------


def _torch_values() -> list[Any]:
    return [
        torch.ones(2, 4),
        torch.ones(3),
        torch.tensor(1.5),
        torch.ones(0, 2),
        torch.arange(6),
        torch.ones(2, 2, dtype=torch.bfloat16),
        torch.ones(1, dtype=torch.bool),
        torch.float32,
        torch.int64,
        torch.device("cpu"),
        torch.device("meta"),
        "cpu",
        "meta",
        "cuda",
        dist.ReduceOp.SUM,
        dist.ReduceOp.MAX,
    ]


ANYTHING = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 64),
    st.floats(),
    st.complex_numbers(),
    st.text(max_size=8),
    st.binary(max_size=4),
    st.lists(st.integers(-2, 9), max_size=3),
    st.tuples(st.integers(-2, 9)),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.frozensets(st.integers(), max_size=2),
    st.decimals(),
    st.fractions(),
    st.builds(object),
    st.sampled_from([int, str, len, print, Ellipsis, NotImplemented, fractions.Fraction(1, 3)]),
    st.sampled_from(_torch_values()),
)
"""Values of many Python types (and torch objects) for arguments; positive ints stay small."""

FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def only_topology_errors(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call and return the result, or None if it raised TopologyError (anything else escapes)."""
    try:
        return call(*args, **kwargs)
    except TopologyError:
        return None


def one_rank_groups() -> list[Any]:
    """Groups of a one-rank world: None (the default), WORLD, a stand-in, and a ProcessGroups."""
    import topology_torch

    return [None, dist.group.WORLD, ops._SingleRank(), topology_torch.current()]


OPS: tuple[Callable[..., Any], ...] = (
    ops.mp_copy,
    ops.mp_reduce,
    ops.mp_scatter,
    ops.mp_gather,
    ops.sp_gather,
    ops.sp_scatter,
)


@FUZZ
@given(st.data())
def _fuzz_ops(data: st.DataObject) -> None:
    """Every op with arguments of any type raises only TopologyError (or returns a tensor)."""
    groups = st.one_of(st.sampled_from(one_rank_groups()), ANYTHING)
    x = data.draw(st.one_of(st.sampled_from(_torch_values()[:7]), ANYTHING), label="x")
    group = data.draw(groups, label="group")
    for fn in OPS:
        second = "op" if fn in (ops.mp_copy, ops.mp_reduce) else "dim"
        value = data.draw(st.one_of(st.integers(-4, 4), ANYTHING), label=f"{fn.__name__} {second}")
        out = only_topology_errors(fn, x, **{second: value, "group": group})
        assert out is None or (out is x and isinstance(x, torch.Tensor))
    only_topology_errors(ops.group_size, group)
    only_topology_errors(ops.group_rank, group)


def with_one_rank_default(fuzz: Callable[[], None]) -> None:
    """Run ``fuzz`` with the default initialized on a one-rank world (tp = 1)."""
    import tests.conftest  # noqa: F401  (the Hypothesis profile: ci when CI=true)
    import topology_torch

    topology_torch.initialize(Topology(1))
    try:
        fuzz()
    finally:
        topology_torch.destroy()


def _fuzz_world(rank: int, n: int) -> None:
    with_one_rank_default(_fuzz_ops)


def test_ops_raise_only_topology_error_for_any_arguments() -> None:
    """On a one-rank world every op, fed arguments of any type, raises only TopologyError."""
    run_world(1, _fuzz_world)
