"""``compat.megatron.HyperCommGrid``: Megatron 0.19's class over the core's grids.

Laws first: ``get_rank_enum`` equals megatron-core 0.19.2's own on random shapes, offsets, dim
subsets (any order) and registered views, and both refuse the same views (one oracle subprocess,
``hyper_comm_grid_oracle.py``, answers every example). Then the errors, pinned. The real gloo
world (``create_pg`` makes the enumerated groups, a shared view dim is the base group, a grid over
part of the world gives None outside it) is :func:`check_a_world`, run by ``test_mimo.py`` in its
8-rank world (one spawned world for both modules). Megatron's own test file runs against this
class in ``test_hyper_comm_grid_peer.py``.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import TopologyError

torch = pytest.importorskip("torch")

from topology_torch.compat.megatron import HyperCommGrid  # noqa: E402
from topology_torch.compat.megatron.hyper_comm_grid import FacadeKeyError  # noqa: E402

from .oracle import LineOracle, oracle_0_19  # noqa: E402

SCRIPT = Path(__file__).resolve().parent / "hyper_comm_grid_oracle.py"
NAMES = ("tp", "cp", "ep", "dp", "pp")
VIEW_NAMES = ("expt_tp", "ep2", "expt_dp", "x")
HUGE = str(2**40)


@pytest.fixture(scope="module")
def oracle() -> Iterator[LineOracle]:
    """megatron-core 0.19.2's HyperCommGrid in a subprocess (skips without it, fails under CI)."""
    process = LineOracle(SCRIPT, oracle_0_19(), "oracle", {"WORLD_SIZE": HUGE})
    yield process
    process.close()


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    """A grid (1 to 4 dims in any order, sizes 1 to 4, an offset), maybe a view, and asks.

    The view re-factors the grid's innermost dims and keeps its outermost ones (shared, so
    valid), or (one time in three) shuffles its dims, which Megatron often refuses.
    """
    count = draw(st.integers(1, 4))
    names = draw(st.permutations(NAMES))[:count]
    shape = [draw(st.integers(1, 4)) for _ in names]
    case: dict[str, Any] = {"shape": shape, "names": names, "offset": draw(st.integers(0, 5))}
    case["view"] = None
    if draw(st.booleans()):
        kept = draw(st.integers(0, count - 1))
        inner = 1
        for size in shape[: count - kept]:
            inner *= size
        sizes: list[int] = []
        while inner > 1 and len(sizes) < 3:
            factor = draw(st.sampled_from([d for d in range(2, inner + 1) if inner % d == 0]))
            sizes.append(factor)
            inner //= factor
        sizes = [*sizes, inner] if inner > 1 or not sizes else sizes
        view_names = list(VIEW_NAMES[: len(sizes)]) + names[count - kept :]
        view_shape = sizes + shape[count - kept :]
        if draw(st.integers(0, 2)) == 0:
            order = draw(st.permutations(range(len(view_names))))
            view_names = [view_names[i] for i in order]
            view_shape = [view_shape[i] for i in order]
        shared = draw(st.lists(st.sampled_from(names[count - kept :]), unique=True)) if kept else []
        case["view"] = {"shape": view_shape, "names": view_names, "shared": shared}
    asks = []
    for _ in range(3):
        in_view = case["view"] is not None and draw(st.booleans())
        pool = case["view"]["names"] if in_view else names
        dims = draw(st.lists(st.sampled_from(pool), min_size=1, unique=True))
        asks.append([dims, in_view])
    case["asks"] = asks
    return case


def _ours(case: dict[str, Any]) -> dict[str, Any]:
    with mock.patch.dict(os.environ, WORLD_SIZE=HUGE):
        try:
            grid = HyperCommGrid(case["shape"], case["names"], rank_offset=case["offset"])
            view = case["view"]
            if view is not None:
                grid.register_view("v", view["shape"], view["names"], shared_dims=view["shared"])
        except TopologyError as error:
            return {"error": error}
    return {
        "enums": [
            grid.get_rank_enum(dims, view="v" if in_view else None)
            for dims, in_view in case["asks"]
        ]
    }


@settings(max_examples=80, deadline=None)
@given(cases())
def test_rank_enumerations_are_megatrons(oracle: LineOracle, case: dict[str, Any]) -> None:
    """get_rank_enum equals Megatron 0.19.2's; a view one refuses the other refuses alike."""
    theirs, ours = oracle.ask(case), _ours(case)
    if "error" in theirs:
        assert "error" in ours, f"Megatron refused {case} with {theirs['error']}, we did not"
        assert isinstance(ours["error"], getattr(builtins, theirs["error"]))
        return
    assert "error" not in ours, f"we refused {case}: {ours.get('error')}"
    assert ours["enums"] == theirs["enums"]


@st.composite
def enum_cases(draw: st.DrawFn) -> dict[str, Any]:
    """A grid (1 to 4 dims in any order, sizes 1 to 4, an offset) and three dim lists in a drawn
    order, each empty one time in five (Megatron's one-rank groups)."""
    count = draw(st.integers(1, 4))
    names = draw(st.permutations(NAMES))[:count]
    shape = [draw(st.integers(1, 4)) for _ in names]
    picks = []
    for _ in range(3):
        order = draw(st.permutations(names))
        picks.append([] if draw(st.integers(0, 4)) == 0 else order[: draw(st.integers(1, count))])
    asks = [[dims, False] for dims in picks]
    offset = draw(st.integers(0, 5))
    return {
        "shape": shape,
        "names": names,
        "offset": offset,
        "view": None,
        "gens": picks,
        "asks": asks,
    }


@settings(max_examples=60, deadline=None)
@given(enum_cases())
def test_private_enumerations_are_megatrons(oracle: LineOracle, case: dict[str, Any]) -> None:
    """``_gen_rank_enum`` (each group's members in the caller's dim order, the last fastest:
    what Megatron's BridgeCommunicator and MultiModuleCommunicator read), ``_gen_rank_enum_for``,
    ``_order_dims_for`` and ``get_rank_enum`` (empty dims too: one group per rank) equal
    Megatron 0.19.2's."""
    theirs = oracle.ask(case)
    with mock.patch.dict(os.environ, WORLD_SIZE=HUGE):
        grid = HyperCommGrid(case["shape"], case["names"], rank_offset=case["offset"])
    assert [grid._gen_rank_enum(dims) for dims in case["gens"]] == theirs["gens"]
    orders = [list(grid._order_dims_for(grid.dim_names, dims)) for dims in case["gens"]]
    assert orders == theirs["orders"]
    assert [grid.get_rank_enum(dims) for dims, _ in case["asks"]] == theirs["enums"]
    shape, names = case["shape"], case["names"]
    assert [grid._gen_rank_enum_for(shape, names, d) for d in case["gens"]] == theirs["gens"]


def test_gen_rank_enum_examples(world_of_8: None) -> None:
    """Megatron's docstring example, another factorization, empty dims, and the refusals."""
    grid = HyperCommGrid([2, 2, 2], ["a", "b", "c"])
    assert grid._gen_rank_enum(["a", "b"]) == [[0, 2, 1, 3], [4, 6, 5, 7]]
    assert grid._gen_rank_enum(["b", "a"]) == grid.get_rank_enum(["a", "b"])
    assert grid._gen_rank_enum([]) == grid.get_rank_enum([]) == [[r] for r in range(8)]
    assert grid._gen_rank_enum_for([4, 2], ["x", "y"], ["x", "y"]) == [[0, 4, 1, 5, 2, 6, 3, 7]]
    assert grid._order_dims_for(grid.dim_names, "b") == (["b"], "b")
    with pytest.raises(TopologyError, match=r"'d' is not a dim of this grid .*\['a', 'b', 'c'\]"):
        grid._gen_rank_enum(["a", "d"])
    with pytest.raises(TopologyError, match=r"axis 'a' is named twice"):
        grid._gen_rank_enum(["a", "a"])
    with pytest.raises(TopologyError, match=r"'d' is not in dim_names \['a', 'b', 'c'\]"):
        grid._order_dims_for(grid.dim_names, ["d"])


# -- errors (Megatron's classes, our messages) ------------------------------------------------


@pytest.fixture
def world_of_8() -> Iterator[None]:
    with mock.patch.dict(os.environ, WORLD_SIZE="8"):
        yield


def test_a_grid_larger_than_the_world_is_a_runtime_error(world_of_8: None) -> None:
    """Megatron's RuntimeError, with the arithmetic."""
    with pytest.raises(RuntimeError, match=r"over sized .* rank offset 2: 2 \+ 8 ranks > 8"):
        HyperCommGrid([2, 4], ["tp", "dp"], rank_offset=2)


def test_bad_shapes_and_names_are_value_errors(world_of_8: None) -> None:
    """Length, size and name mistakes are TopologyErrors (ValueErrors) naming the fix."""
    with pytest.raises(TopologyError, match=r"len\(shape\) \[2, 2\] != len\(dim_names\) \['tp'\]"):
        HyperCommGrid([2, 2], ["tp"])
    with pytest.raises(TopologyError, match=r"shape must be positive ints, got \[2, 0\]"):
        HyperCommGrid([2, 0], ["tp", "dp"])
    with pytest.raises(TopologyError, match=r"duplicate dim_names: \['tp', 'tp'\] names 'tp'"):
        HyperCommGrid([2, 2], ["tp", "tp"])
    with pytest.raises(TopologyError, match=r"dim name 'tp-cp' is not valid"):
        HyperCommGrid([2], ["tp-cp"])


def test_unknown_views_and_dims(world_of_8: None) -> None:
    """An unknown view is a KeyError, a dim outside the view a ValueError, both TopologyErrors."""
    grid = HyperCommGrid([2, 2, 2], ["tp", "dp", "pp"])
    grid.register_view("expert", [4, 2], ["ep", "pp"], shared_dims=["pp"])
    with pytest.raises(FacadeKeyError, match=r"View 'moe' is not registered.*\['base', 'expert'\]"):
        grid.get_rank_enum("ep", view="moe")
    with pytest.raises(TopologyError, match=r"'ep' is not in view 'base' .* or pass view="):
        grid.get_rank_enum(["ep", "pp"])
    with pytest.raises(TopologyError, match=r"dims \['tp', 'tp'\] must name each dim once"):
        grid.get_rank_enum(["tp", "tp"])
    with pytest.raises(FacadeKeyError, match=r"Process group for dp-tp hasn't been created"):
        grid.get_pg(["tp", "dp"])


def test_views_that_break_a_shared_dim_are_refused(world_of_8: None) -> None:
    """A shared dim must give the base view's groups; the message shows the first difference."""
    grid = HyperCommGrid([2, 2, 2], ["tp", "dp", "pp"])
    with pytest.raises(
        TopologyError, match=r"base group 0 is \[0, 4\] but view 'expert' group 0 is \[0, 1\]"
    ):
        grid.register_view("expert", [2, 4], ["pp", "ep"], shared_dims=["pp"])
    with pytest.raises(TopologyError, match=r"size 2 \* 2 = 4, but the grid size is 8"):
        grid.register_view("expert", [2, 2], ["ep", "pp"])


# -- a real gloo world (run by test_mimo.py) ------------------------------------------------


def check_a_world(rank: int) -> None:
    """On a gloo world of 8 ranks: groups, view reuse, partial grids, repeats refused, destroy."""
    from datetime import timedelta

    import torch.distributed as dist

    def ranks(group: Any) -> list[int]:
        return list(dist.get_process_group_ranks(group))

    def mine(enum: list[list[int]]) -> list[int]:
        return next(g for g in enum if rank in g)

    grid = HyperCommGrid([2, 2, 2], ["tp", "dp", "pp"])
    grid.register_view("expert", [1, 4, 2], ["expt_tp", "ep", "pp"], shared_dims=["pp"])
    dp_tp = grid.create_pg(["dp", "tp"], timeout=timedelta(minutes=5), group_desc="DP_TP")
    assert ranks(dp_tp) == mine(grid.get_rank_enum(["tp", "dp"]))
    assert grid.get_pg(["tp", "dp"]) is dp_tp
    pp = grid.create_pg("pp", view="expert")  # shared: the base group
    assert grid.get_pg("pp") is pp and ranks(pp) == mine(grid.get_rank_enum("pp"))
    ep = grid.create_pg(["ep"], view="expert")
    assert ranks(ep) == mine(grid.get_rank_enum("ep", view="expert"))
    with pytest.raises(KeyError, match=r"Process group pp has already been created"):
        grid.create_pg("pp")
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'backend'"):
        grid.create_pg("tp", backend="gloo")

    half = HyperCommGrid([2, 2], ["tp", "dp"], rank_offset=4)  # ranks 4 to 7
    tp = half.create_pg("tp")
    assert half.is_current_rank_in_grid() == (rank >= 4)
    assert (tp is None) == (rank < 4)
    if tp is not None:
        assert ranks(tp) == mine(half.get_rank_enum("tp"))
    alone = grid.create_pg([])  # Megatron's one-rank groups, kept under the key ""
    assert ranks(alone) == [rank] and grid.get_pg([]) is alone

    # the backend goes to torch's new_group as given (Megatron's pass-through); here NCCL is
    # made gloo on the way, as scripts/peers/bridge_communicator_harness.py does
    asked: list[Any] = []
    original = dist.new_group

    def recording(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("backend"))
        return original(*args, **{**kwargs, "backend": "gloo"})

    nccl = HyperCommGrid([2, 4], ["tp", "dp"], backend="nccl")
    with mock.patch.object(dist, "new_group", recording):
        dp = nccl.create_pg("dp")
    assert set(asked) == {"nccl"} and ranks(dp) == mine(nccl.get_rank_enum("dp"))
    if not dist.is_nccl_available():  # torch itself refuses, as for Megatron's class
        with pytest.raises(RuntimeError, match="NCCL"):
            nccl.create_pg("tp")
    for each in (grid, half, nccl):
        each.destroy()
    with pytest.raises(KeyError, match="hasn't been created"):
        grid.get_pg("pp")
