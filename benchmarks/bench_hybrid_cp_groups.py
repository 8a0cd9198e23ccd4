"""Creation calls per rank for Megatron's hybrid (dynamic) context-parallel groups.

Under torch's ``fake`` backend (one simulated rank, no data moves), for W = 16,384 and 131,072
(``--quick``: 1,024 and 16,384) and two layouts, it counts the ``new_group``/``split_group``
calls one rank makes for ``hybrid_context_parallel=True``'s groups (every power-of-two block of
each dp-cp group, ``topology.hybrid_cp_groups``):

- ``ours lazy``: the façade's ``initialize_model_parallel(hybrid_context_parallel=True)``
  (strategy ``auto``, members-only groups here): calls in initialize, then after one get of
  every size (``get_hybrid_data_context_parallel_groups(group_size=s)``);
- ``ours eager``: the same with ``hybrid_groups="eager"``: every size made in initialize;
- ``megatron``: megatron-core's own ``initialize_model_parallel(hybrid_context_parallel=True,
  create_gloo_process_groups=False)`` run on the fake backend, its calls whose ``group_desc`` is
  ``HYBRID_DP_CP_GROUP_<size>`` counted (if megatron-core imports; the version is reported; run
  with ``PYTHONPATH=.venv/oracles/megatron-core-0.19.2`` for 0.19.2; skipped where the previous W's
  time scaled linearly exceeds ``--cap``);
- ``megatron loop``: the same count from the structure of Megatron's loop
  (``create_hybrid_dp_cp_groups``: every rank enters every block of every size of every dp-cp
  group, ``W / n * sum(ceil(n / s))`` for dp-cp groups of ``n`` ranks), for every W.

Seconds are medians of ``--repeat`` runs of the whole initialize (and gets) for ours, one run
for Megatron. Prints a table and writes ``benchmarks/results/bench_hybrid_cp_groups.json``.

Run: ``python benchmarks/bench_hybrid_cp_groups.py`` (``--quick``: smaller worlds).
"""

from __future__ import annotations

import argparse
import time
import warnings
from functools import partial
from typing import Any

from _fake_world import counting, fake_world
from _timing import median_seconds, write_result

from topology import Topology, hybrid_cp_groups
from topology_torch.compat import megatron as mpu

LAYOUTS: dict[str, dict[str, int]] = {
    "tp8 cp2": {"tensor_model_parallel_size": 8, "context_parallel_size": 2},
    "tp8 cp4 pp4": {
        "tensor_model_parallel_size": 8,
        "context_parallel_size": 4,
        "pipeline_model_parallel_size": 4,
    },
}
RANK = 0


def _hybrid(calls: list[str]) -> int:
    return sum("hybrid" in c.lower() for c in calls)


def topology_of(layout: str, world: int) -> Topology:
    sizes = LAYOUTS[layout]
    return Topology(
        world,
        tp=sizes["tensor_model_parallel_size"],
        cp=sizes["context_parallel_size"],
        pp=sizes.get("pipeline_model_parallel_size", 1),
    )


def ours(layout: str, world: int, eager: bool) -> dict[str, int]:
    """The façade's hybrid calls in initialize and after one get of every size."""
    sizes = sorted(hybrid_cp_groups(topology_of(layout, world)))
    with counting() as calls:
        mpu.initialize_model_parallel(
            **LAYOUTS[layout],
            hybrid_context_parallel=True,
            hybrid_groups="eager" if eager else "lazy",
        )
        at_initialize = _hybrid(calls)
        for size in sizes:
            mpu.get_hybrid_data_context_parallel_groups(group_size=size)
        after_gets = _hybrid(calls)
    mpu.destroy_model_parallel()
    return {"initialize": at_initialize, "after_gets": after_gets, "sizes": len(sizes)}


def megatron(layout: str, world: int) -> int:
    """Megatron's own hybrid calls on this rank (it creates every group on every rank)."""
    from megatron.core import parallel_state

    with counting() as calls:
        parallel_state.initialize_model_parallel(
            **LAYOUTS[layout], hybrid_context_parallel=True, create_gloo_process_groups=False
        )
    parallel_state.destroy_model_parallel()
    parallel_state._HYBRID_DP_CP_GROUPS.clear()  # Megatron's destroy keeps it
    return _hybrid(calls)


def megatron_loop(layout: str, world: int) -> int:
    """Megatron's count from its loop: every rank enters every block of every dp-cp group."""
    topo = topology_of(layout, world)
    n = topo.size("dp-cp")
    sizes = [2**i for i in range(1, n.bit_length() - 1)]
    return world // n * sum(-(-n // s) for s in sizes)


def _megatron_version() -> str | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import megatron.core.parallel_state  # noqa: F401
            from megatron.core import package_info
    except ImportError:
        return None
    return str(package_info.__version__).split("+")[0]  # an unpacked wheel appends a git hash


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="W = 1,024 and 16,384")
    parser.add_argument("--repeat", type=int, default=3, help="runs per median (ours)")
    parser.add_argument("--cap", type=float, default=300.0, help="seconds; skip Megatron above")
    parser.add_argument("--out", default="benchmarks/results/bench_hybrid_cp_groups.json")
    args = parser.parse_args()
    worlds = [1024, 16384] if args.quick else [16384, 131072]
    version = _megatron_version()
    rows: list[dict[str, Any]] = []
    for layout in LAYOUTS:
        megatron_seconds = previous = 0.0
        for world in worlds:
            row: dict[str, Any] = {"layout": layout, "world_size": world}
            row["dp_cp"] = topology_of(layout, world).size("dp-cp")
            for name, eager in (("lazy", False), ("eager", True)):
                with fake_world(world, RANK):
                    row[name] = ours(layout, world, eager)
                    row[f"{name}_seconds"] = median_seconds(
                        partial(ours, layout, world, eager), args.repeat
                    )
            row["megatron_loop"] = megatron_loop(layout, world)
            predicted = megatron_seconds * world / previous if previous else 0.0
            if version is not None and predicted <= args.cap:
                with warnings.catch_warnings(), fake_world(world, RANK):
                    warnings.simplefilter("ignore")
                    start = time.perf_counter()
                    row["megatron"] = megatron(layout, world)
                    megatron_seconds, previous = time.perf_counter() - start, float(world)
                    row["megatron_seconds"] = megatron_seconds
            rows.append(row)
    meta = {
        "backend": "fake",
        "rank": RANK,
        "megatron_core": version,
        "cap_seconds": args.cap,
        "notes": "calls = hybrid-group new_group/split_group calls by one rank; ours uses "
        "strategy auto (members-only groups on the fake backend); megatron = measured, "
        "megatron_loop = from its loop structure; seconds: ours median of the whole "
        "initialize + gets + destroy, megatron one run of its whole initialize",
    }
    write_result(args.out, {"meta": meta, "rows": rows})
    _print(rows, version)


def _print(rows: list[dict[str, Any]], version: str | None) -> None:
    header = [
        "layout",
        "W",
        "dp*cp",
        "sizes",
        "ours lazy: init / after gets",
        "ours eager: init",
        f"megatron {version or '(not installed)'} measured",
        "megatron loop",
        "ours eager s",
        "megatron s",
    ]
    lines = []
    for row in rows:
        lazy, eager = row["lazy"], row["eager"]
        lines.append(
            [
                row["layout"],
                f"{row['world_size']:,}",
                f"{row['dp_cp']:,}",
                str(lazy["sizes"]),
                f"{lazy['initialize']} / {lazy['after_gets']}",
                str(eager["initialize"]),
                f"{row['megatron']:,}" if "megatron" in row else "skipped",
                f"{row['megatron_loop']:,}",
                f"{row['eager_seconds']:.3f}",
                f"{row['megatron_seconds']:.1f}" if "megatron_seconds" in row else "-",
            ]
        )
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("-|-".join("-" * w for w in widths))
    for line in lines:
        print(" | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)))


if __name__ == "__main__":
    main()
