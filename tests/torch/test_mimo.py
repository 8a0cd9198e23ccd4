"""``compat.megatron.mimo``: Megatron MIMO's ``create_topology`` from one ``topology.Modules``.

Laws first: for random valid specs (one to three modules, colocated or disjoint, with cp, pp,
ep, expert tp and both GTP axes), every family of every module has the groups megatron-core
0.19.2's own ``HyperCommGrid.get_rank_enum`` gives for Megatron's dims and view, and the language
module's embedding groups follow Megatron's rule (one oracle subprocess answers every example).
Then the errors, pinned; the calls per rank at 16,384 ranks (``fake``); and a real gloo world of 8:
two disjoint modules and a colocated pair, every group's ranks checked on every rank, then
``HyperCommGrid.create_pg`` on its own (``test_hyper_comm_grid.check_a_world``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import TopologyError

torch = pytest.importorskip("torch")

from topology_torch.compat.megatron.mimo import (  # noqa: E402
    BASE_DIMS,
    EMBEDDINGS,
    EXPERT,
    EXPERT_DIMS,
    FAMILIES,
    SPAN,
    ModuleGridSpec,
    _base_shape,
    _expert_shape,
    _kind,
    create_topology,
    modules_of,
)

from .oracle import LineOracle  # noqa: E402
from .test_hyper_comm_grid import check_a_world  # noqa: E402
from .test_hyper_comm_grid import oracle as oracle  # noqa: E402 - the module fixture
from .world import fake_world, run_world  # noqa: E402


def _divisor(draw: st.DrawFn, of: int, most: int = 4) -> int:
    return draw(st.sampled_from([d for d in range(1, min(of, most) + 1) if of % d == 0]))


def _spec(draw: st.DrawFn, name: str, ranks: int | None, offset: int) -> ModuleGridSpec:
    """A module of ``ranks`` ranks (drawn when None) with sizes that divide them."""
    if ranks is None:
        ranks = draw(st.sampled_from([1, 2, 4, 8, 16, 24, 32]))
    pp = _divisor(draw, ranks)
    rest = ranks // pp
    tp = _divisor(draw, rest)
    gtp = _divisor(draw, rest // tp, 2)
    cp = _divisor(draw, rest // tp // gtp, 2)
    etp = _divisor(draw, rest, 2)
    ep = _divisor(draw, rest // etp)
    egtp = _divisor(draw, rest // etp // ep, 2)
    return ModuleGridSpec(
        name, ranks, tp=tp, cp=cp, pp=pp, ep=ep, gtp_remat=gtp, rank_offset=offset,
        expt_tp=etp, expt_gtp_remat=egtp,
    )  # fmt: skip


@st.composite
def spec_lists(draw: st.DrawFn) -> list[ModuleGridSpec]:
    """One to three modules, the language one among them, colocated or tiling the world."""
    names = ["language", *draw(st.lists(st.sampled_from(["vision", "audio"]), unique=True))]
    names = draw(st.permutations(names))
    if len(names) > 1 and draw(st.booleans()):  # colocated: one span for all
        ranks = draw(st.sampled_from([4, 8, 16]))
        return [_spec(draw, name, ranks, 0) for name in names]
    specs, offset = [], 0
    for name in names:
        specs.append(_spec(draw, name, None, offset))
        offset += specs[-1].num_ranks
    return specs


def _ours(module: Any, kind: str | None) -> list[list[int]]:
    if kind is None:  # a size-1 GTP axis: every rank alone, as Megatron enumerates it
        return [[r] for r in module.span]
    if kind == SPAN:
        return [list(module.span)]
    return [list(g) for g in module.groups(kind)]


@settings(max_examples=40, deadline=None)
@given(spec_lists())
def test_every_group_is_megatrons(oracle: LineOracle, specs: list[ModuleGridSpec]) -> None:
    """Every family's groups and the embedding groups equal Megatron 0.19.2's."""
    modules = modules_of(specs)
    for spec, module in zip(specs, modules.modules, strict=True):
        case = {
            "shape": _base_shape(spec),
            "names": BASE_DIMS,
            "offset": spec.rank_offset,
            "view": {"shape": _expert_shape(spec), "names": EXPERT_DIMS, "shared": ["pp"]},
            "asks": [[list(dims), view == EXPERT] for _, _, view, dims, _ in FAMILIES],
            "embeddings": spec.name == "language",
        }
        theirs = oracle.ask(case)
        assert "error" not in theirs, f"Megatron refused {spec}"
        for (pg_name, _, _, _, kind), enum in zip(FAMILIES, theirs["enums"], strict=True):
            ours = _ours(module, SPAN if kind == SPAN else _kind(module.layout, kind))
            assert ours == enum, f"{spec.name} {pg_name}"
        if spec.name == "language":
            for (_, kind), enum in zip(EMBEDDINGS, theirs["embeddings"], strict=True):
                assert _ours(module, kind) == enum, f"{spec.name} {kind}"


# -- errors ----------------------------------------------------------------------------------


def test_specs_that_do_not_divide_are_refused() -> None:
    """ModuleGridSpec shows the product that must divide num_ranks."""
    with pytest.raises(TopologyError, match=r"by tp\*gtp_remat\*cp\*pp = 2\*1\*1\*4 = 8"):
        ModuleGridSpec("language", 12, tp=2, pp=4)
    with pytest.raises(TopologyError, match=r"expt_tp\*ep\*expt_gtp_remat\*pp = 1\*8\*1\*1 = 8"):
        ModuleGridSpec("language", 12, ep=8)


def test_plans_need_one_language_module_and_a_tiling() -> None:
    """Exactly one 'language' module; spans coincide or tile [0, world)."""
    with pytest.raises(TopologyError, match=r"exactly one spec named 'language'.*got 0"):
        modules_of([ModuleGridSpec("vision", 4)])
    with pytest.raises(TopologyError, match=r"ranks \[4, 6\) are in no module"):
        modules_of([ModuleGridSpec("vision", 4), ModuleGridSpec("language", 4, rank_offset=6)])
    with pytest.raises(TopologyError, match=r"overlap without sharing their span"):
        modules_of([ModuleGridSpec("vision", 4), ModuleGridSpec("language", 4, rank_offset=2)])


# -- scale (fake backend: nothing is sent, calls are counted) ------------------------------


@pytest.fixture
def rank_of_16384() -> Iterator[None]:
    with fake_world(16_384, 8_192):
        yield


def test_calls_per_rank_stay_small_at_16384_ranks(rank_of_16384: None) -> None:
    """Two disjoint modules at tp 8, pp 8: at most 24 new_group calls (Megatron: 111,298)."""
    specs = [
        ModuleGridSpec("vision", 8_192, tp=8, pp=8),
        ModuleGridSpec("language", 8_192, tp=8, pp=8, rank_offset=8_192),
    ]
    topo = create_topology(specs)
    assert topo.calls <= 24
    assert topo.module_pgs["vision"].tp is None
    assert type(topo.schedule_pg_collection).__name__.startswith("MultiModule")
    topo.destroy()


def test_a_module_mesh_holds_its_groups_and_names_what_it_refuses() -> None:
    """HeteroTopology.device_mesh: the module's groups, no new one; bad asks are named."""
    import torch.distributed.distributed_c10d as c10d

    specs = [
        ModuleGridSpec("vision", 4, tp=2, gtp_remat=2),
        ModuleGridSpec("language", 4, tp=2, rank_offset=4),
    ]
    with fake_world(8, 1):
        topo = create_topology(specs)
        made = len(c10d._world.pg_map)
        mesh = topo.device_mesh("vision", "gtp", "tp")
        assert mesh.mesh.tolist() == [[0, 1], [2, 3]]
        assert mesh.get_group("tp") is topo.module_pgs["vision"].tp
        assert mesh.get_group("gtp") is topo.module_pgs["vision"].gtp_remat
        assert len(c10d._world.pg_map) == made
        with pytest.raises(
            TopologyError, match=r"^no module is called 'audio'; the modules are vision, language$"
        ):
            topo.device_mesh("audio", "tp")
        with pytest.raises(
            TopologyError,
            match=r"^rank 1 does not serve module 'language'; ask one of its ranks 4 to 7$",
        ):
            topo.device_mesh("language", "tp")
        with pytest.raises(
            TopologyError,
            match=r"^create_topology made no 'gtp-dp' group \(MIMO has no such family\); use "
            r"one of tp, gtp, cp, pp, dp, dp-cp, ",
        ):
            topo.device_mesh("vision", "gtp-dp")
        topo.destroy()


def test_megatrons_example_helpers_answer_as_megatrons(monkeypatch: pytest.MonkeyPatch) -> None:
    """_get_pg_options and _validate_grid_layout (Megatron's own test imports them)."""
    from types import SimpleNamespace

    import torch.distributed as dist

    from topology_torch.compat.megatron.hyper_comm_grid import HyperCommGrid
    from topology_torch.compat.megatron.mimo import _get_pg_options, _validate_grid_layout

    fake = SimpleNamespace(Options=lambda **kwargs: SimpleNamespace(**kwargs))
    monkeypatch.setattr(dist, "ProcessGroupNCCL", fake, raising=False)
    assert _get_pg_options("tp", ["tp", "ep"]).is_high_priority_stream
    assert _get_pg_options("mp", ["tp"]) is None and _get_pg_options("tp", None) is None
    with fake_world(8, 0):

        def grids(*spans: tuple[int, int]) -> dict[str, Any]:
            names = ("vision", "language", "audio")
            return {
                name: HyperCommGrid([size], ["dp"], rank_offset=start)
                for name, (start, size) in zip(names, spans, strict=False)
            }

        _validate_grid_layout(grids((0, 8), (0, 8)))
        _validate_grid_layout(grids((0, 2), (2, 2), (4, 4)))
        with pytest.raises(
            TopologyError,
            match=r"^module grids \{'vision': \(0, 4\), 'language': \(2, 6\)\} must share one "
            r"span or partition the world \[0, 8\) with no gaps: modules 'vision' \[0, 4\) and "
            r"'language' \[2, 6\) overlap without sharing their span; .* make every span disjoint$",
        ):
            _validate_grid_layout(grids((0, 4), (2, 4)))
        with pytest.raises(
            TopologyError, match=r"partition the world \[0, 8\) .* ranks \[2, 4\) are in no"
        ):
            _validate_grid_layout(grids((0, 2), (4, 2)))
        with pytest.raises(
            TopologyError,
            match=r"^module grids must partition the world \[0, 8\) with no gaps, but they cover "
            r"\[0, 6\); size the modules to the world$",
        ):
            _validate_grid_layout(grids((0, 2), (2, 4)))


# -- a real gloo world -----------------------------------------------------------------------


def _check(topo: Any, specs: list[ModuleGridSpec], rank: int) -> None:
    import torch.distributed as dist

    from topology_torch.compat.megatron import default_embedding_ranks

    def ranks(group: Any) -> list[int]:
        return list(dist.get_process_group_ranks(group))

    served = []
    for spec in specs:
        grid, pgc = topo.grids[spec.name], topo.module_pgs[spec.name]
        if not spec.rank_offset <= rank < spec.rank_offset + spec.num_ranks:
            assert pgc.tp is None and grid.get_pg("tp") is None
            continue
        served.append(spec.name)
        for pg_name, fields, view, dims, _ in FAMILIES:
            enum = grid.get_rank_enum(list(dims), view=view)
            mine = next(g for g in enum if rank in g)
            group = grid.get_pg(list(dims), view=view)
            assert ranks(group) == mine, f"{spec.name} {pg_name}"
            assert all(getattr(pgc, field) is group for field in fields)
        pipeline = next(g for g in grid.get_rank_enum("pp") if rank in g)
        embedding = default_embedding_ranks(pipeline)
        if spec.name == "language" and rank in embedding:
            assert ranks(pgc.embd) == embedding
        else:
            assert pgc.embd is None
        assert pgc.dp_cp is pgc.dp  # cp = 1: one communicator serves both families
    assert list(topo.schedule_pg_collection.module_pgs) == served
    language = "language" if "language" in served else None
    assert topo.schedule_pg_collection.language_model_module_name == language


def _two_layouts(rank: int, world_size: int) -> None:
    from topology_torch.compat.megatron import mimo

    # the stand-in collections (no megatron-core import in each of the 8 processes; the
    # fake-backend test above gets Megatron's own classes)
    mimo._collection_classes = lambda: (mimo.ModuleProcessGroups, mimo.MultiModuleProcessGroups)
    disjoint = [
        ModuleGridSpec("vision", 4, tp=2),
        ModuleGridSpec("language", 4, tp=2, pp=2, ep=2, rank_offset=4),
    ]
    colocated = [
        ModuleGridSpec("language", 8, tp=2, pp=2, ep=2, expt_tp=2),
        ModuleGridSpec("vision", 8, pp=2, ep=4),
    ]
    for specs in (disjoint, colocated):
        topo = create_topology(specs)
        _check(topo, specs, rank)
        topo.destroy()
    check_a_world(rank)  # HyperCommGrid's own create_pg (one spawned world for both files)


def test_create_topology_makes_megatrons_groups() -> None:
    """On 8 gloo ranks, disjoint (4 + 4) and colocated modules: every group, every rank; and
    HyperCommGrid.create_pg's groups (test_hyper_comm_grid.check_a_world)."""
    run_world(8, _two_layouts)
