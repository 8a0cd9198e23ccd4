"""The GPU check of issue 21: run it on a machine with one CUDA GPU; it prints a table and exits
non-zero on any failure (under 3 minutes on an H100).

    PYTHONPATH=src[:path/to/megatron-core] python scripts/gpu_check.py

(a) an NCCL world of one process, bound to the GPU (``device_id``) and unbound: every strategy
    (the list ``ProcessGroups.create`` gives when it refuses an unknown one) makes
    ``ProcessGroups.create(Topology(1))`` or is refused with a ``TopologyError`` naming it
    (``auto`` and ``all`` never are), and an all-reduce on every group is right;
(b) ``compat.megatron.install()`` + Megatron's own ``initialize_model_parallel(1, 1)``, its
    getters, ``destroy_model_parallel()``, ``uninstall()`` (SKIP where ``megatron.core`` does
    not import);
(c) each façade's initialize on the bound group: megatron, fairscale, ezpz, ml, torchtitan;
(d) the layers on CUDA at tp 1: forward and backward equal ``torch.nn`` with no host
    synchronisation (``torch.cuda.set_sync_debug_mode("error")``), and the weights are the
    slices of the master drawn on the CPU from the same seed;
(e) peak GPU memory of building ``VocabParallelEmbedding(128256, 8192)`` and
    ``ColumnParallelLinear(8192, 28672)`` in bf16 as rank 0 of tp 8 (a ``fake`` world of 8 in
    this process), against the shard: before (the old code: the fp32 master on the GPU, then a
    slice) and after (the layer as built now).

Without CUDA it is a dry run: (a) to (d) run on gloo and the CPU (the unbound world only), (e)
and every CUDA-only check print SKIP, and it exits 0 unless something fails.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import topology_torch
from topology import Topology, TopologyError
from topology_torch import ProcessGroups
from topology_torch.layers import ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding

CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda", 0) if CUDA else torch.device("cpu")
BACKEND = "nccl" if CUDA else "gloo"
ROWS: list[tuple[str, str, str, str]] = []  # (section, check, PASS/FAIL/SKIP, detail)


def record(section: str, check: str, status: str, detail: str = "") -> None:
    ROWS.append((section, check, status, detail))
    print(f"[{status}] {section} {check}: {detail}", flush=True)


def run(section: str, check: str, fn: Callable[[], str]) -> None:
    """Run one check; its return value is the detail, any exception a FAIL."""
    start = time.perf_counter()
    try:
        detail = fn()
    except Skip as why:
        record(section, check, "SKIP", str(why))
        return
    except BaseException as error:  # a check's failure must not stop the others
        lines = traceback.format_exception_only(type(error), error)
        record(section, check, "FAIL", " ".join(lines[-1].split())[:160])
        traceback.print_exc()
        return
    record(section, check, "PASS", f"{detail} ({time.perf_counter() - start:.1f} s)")


class Skip(Exception):
    """A check that cannot run here."""


@contextmanager
def world(bound: bool) -> Iterator[None]:
    """A default group of one process on a FileStore; ``bound`` passes ``device_id``."""
    if bound and not CUDA:
        raise Skip("binding needs NCCL on CUDA")
    with tempfile.TemporaryDirectory() as folder:
        store = dist.FileStore(os.path.join(folder, "store"), 1)  # type: ignore[attr-defined]
        extra: dict[str, Any] = {"device_id": DEVICE} if bound else {}
        dist.init_process_group(BACKEND, store=store, rank=0, world_size=1, **extra)
        try:
            yield
        finally:
            topology_torch.destroy()
            dist.destroy_process_group()


def all_reduce_ok(group: Any) -> None:
    """An all-reduce on ``group`` (of one rank here) gives the sum: the value itself."""
    value = torch.full((4,), 3.0, device=DEVICE)
    dist.all_reduce(value, group=group)
    if not torch.equal(value.cpu(), torch.full((4,), 3.0 * dist.get_world_size(group))):
        raise AssertionError(f"all_reduce gave {value.tolist()}")


# -- (a) every strategy ---------------------------------------------------------------------


STRATEGIES = ("auto", "all", "local", "split")
"""``ProcessGroups.create``'s strategies (:func:`known_strategies` checks the list)."""


def known_strategies() -> str:
    """``ProcessGroups.create`` refuses an unknown strategy naming exactly :data:`STRATEGIES`."""
    listed = ", ".join(map(repr, STRATEGIES))
    try:
        ProcessGroups.create(Topology(1), strategy="unknown")
    except TopologyError as refusal:
        if f"use one of {listed}" not in str(refusal):
            raise AssertionError(f"create knows other strategies: {refusal}") from None
        return f"create's strategies: {listed}"
    raise AssertionError("create took strategy 'unknown'")


def strategy(name: str) -> str:
    try:
        groups = ProcessGroups.create(Topology(1), strategy=name)
    except TopologyError as refusal:
        if name in ("auto", "all") or f"strategy {name!r}" not in str(refusal):
            raise
        return f"refused: {str(refusal)[:60]}..."
    try:
        for kind in groups.kinds:
            all_reduce_ok(groups.group(kind))
        return (
            f"-> {groups.strategy}: {len(groups.kinds)} kinds, {groups.calls} calls, "
            f"{groups.communicators} communicators, all-reduce right"
        )
    finally:
        groups.destroy()


def section_a(bound: bool) -> None:
    run("a", f"{'bound' if bound else 'unbound'} strategy list", known_strategies)
    for name in STRATEGIES:
        label = f"{'bound' if bound else 'unbound'} strategy {name}"
        run("a", label, functools.partial(strategy, name))


# -- (b) Megatron's own parallel_state under install() --------------------------------------


def megatron_state() -> Any:
    try:
        from megatron.core import parallel_state  # type: ignore[import-untyped]
    except Exception as error:
        raise Skip(f"megatron.core does not import ({type(error).__name__}: {error})") from None
    return parallel_state


def megatron_install() -> str:
    state = megatron_state()
    from topology_torch.compat import megatron

    megatron.install()
    try:
        state.initialize_model_parallel(1, 1)
        sizes = (
            state.get_tensor_model_parallel_world_size(),
            state.get_pipeline_model_parallel_world_size(),
            state.get_data_parallel_world_size(),
            state.get_tensor_model_parallel_rank(),
        )
        if sizes != (1, 1, 1, 0):
            raise AssertionError(f"tp, pp, dp sizes and tp rank are {sizes}, not (1, 1, 1, 0)")
        all_reduce_ok(state.get_tensor_model_parallel_group())
        all_reduce_ok(state.get_data_parallel_group())
        state.destroy_model_parallel()
        if state.model_parallel_is_initialized():
            raise AssertionError("still initialized after destroy_model_parallel()")
    finally:
        if megatron.model_parallel_is_initialized():
            megatron.destroy_model_parallel()
        megatron.uninstall()
    try:
        version = importlib.metadata.version("megatron-core")
    except importlib.metadata.PackageNotFoundError:
        version = "(version unknown)"
    return f"megatron-core {version}: getters right, destroyed, uninstalled"


# -- (c) the façades --------------------------------------------------------------------------


def facade_megatron() -> str:
    from topology_torch.compat import megatron as mpu

    mpu.initialize_model_parallel(1, 1)
    try:
        all_reduce_ok(mpu.get_tensor_model_parallel_group())
        all_reduce_ok(mpu.get_data_parallel_group())
        return f"tp {mpu.get_tensor_model_parallel_world_size()}"
    finally:
        mpu.destroy_model_parallel()


def facade_fairscale() -> str:
    from topology_torch.compat import fairscale as mpu

    mpu.initialize_model_parallel(1)
    try:
        all_reduce_ok(mpu.get_model_parallel_group())
        all_reduce_ok(mpu.get_data_parallel_group())
        return f"mp {mpu.get_model_parallel_world_size()}"
    finally:
        mpu.destroy_model_parallel()


def facade_ezpz() -> str:
    from topology_torch.compat import ezpz as tp

    tp.initialize_tensor_parallel(1)
    try:
        all_reduce_ok(tp.get_tensor_parallel_group())
        return f"tp {tp.get_tensor_parallel_world_size()}"
    finally:
        tp.destroy_tensor_parallel()


def facade_ml() -> str:
    from topology_torch.compat import ml as parallel

    parallel.init_parallelism(1, 1)
    try:
        info = parallel.parallel_group_info()
        for one in (info.mp, info.pp, info.dp):
            all_reduce_ok(one.group)
        return f"mp {info.mp.world_size}"
    finally:
        parallel.reset_parallelism()


def facade_torchtitan() -> str:
    from topology_torch.compat.torchtitan import ParallelDims

    dims = ParallelDims(dp_replicate=1, dp_shard=-1, cp=1, tp=1, pp=1, ep=1, world_size=1)
    mesh = dims.build_mesh()
    try:
        for dim in range(mesh.ndim):
            all_reduce_ok(mesh.get_group(dim))
        return f"world mesh {tuple(mesh.shape)} on {mesh.device_type}, all-reduce on each dim"
    finally:
        dims.groups.destroy()


FACADES = {
    "megatron": facade_megatron,
    "fairscale": facade_fairscale,
    "ezpz": facade_ezpz,
    "ml": facade_ml,
    "torchtitan": facade_torchtitan,
}


# -- (d) the layers on the device --------------------------------------------------------------


@contextmanager
def no_sync() -> Iterator[None]:
    """Host synchronisations raise (CUDA only)."""
    if not CUDA:
        yield
        return
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def same_as_torch(layer: nn.Module, ref: nn.Module, x: torch.Tensor) -> None:
    """Forward and backward of ``layer`` equal ``ref``'s, with no host synchronisation."""
    with no_sync():
        got = layer(x)
        got.square().sum().backward()
        want = ref(x)
        want.square().sum().backward()
    torch.testing.assert_close(got, want)
    for mine, theirs in zip(layer.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad)


def layers_on_device() -> str:
    group = dist.group.WORLD
    n_in, n_out, vocab = 256, 384, 1000
    torch.manual_seed(5)
    column = ColumnParallelLinear(n_in, n_out, group=group, device=DEVICE)
    torch.manual_seed(5)
    master = nn.init.xavier_normal_(torch.empty(n_out, n_in))  # drawn on the CPU
    if not torch.equal(column.weight.detach().cpu(), master):
        raise AssertionError("the column weight is not the CPU master drawn from the same seed")
    row = RowParallelLinear(n_out, n_in, group=group, device=DEVICE)
    emb = VocabParallelEmbedding(vocab, n_in, group=group, device=DEVICE)
    for layer, ref in (
        (column, nn.Linear(n_in, n_out, device=DEVICE)),
        (row, nn.Linear(n_out, n_in, device=DEVICE)),
    ):
        ref.load_state_dict({"weight": layer.master_weight, "bias": layer.master_bias})
        x = torch.randn(8, 16, ref.in_features, device=DEVICE)
        same_as_torch(layer, ref, x)
    table = nn.Embedding(vocab, n_in, device=DEVICE)
    table.load_state_dict({"weight": emb.master_weight})
    ids = torch.randint(0, vocab, (8, 16), device=DEVICE)
    same_as_torch(emb, table, ids)
    sync = "no host sync" if CUDA else "sync check needs CUDA"
    return f"column, row, vocab embedding equal torch.nn fwd+bwd on {DEVICE.type}, {sync}"


# -- (e) peak memory of building two big layers at tp 8 ------------------------------------------

BIG = (
    ("VocabParallelEmbedding(128256, 8192)", lambda g: VocabParallelEmbedding(128256, 8192, **g)),
    ("ColumnParallelLinear(8192, 28672)", lambda g: ColumnParallelLinear(8192, 28672, **g)),
)
SHARDS = {  # rank 0 of 8: (full shape, dim cut, with a bias)
    BIG[0][0]: ((128256, 8192), 0, False),
    BIG[1][0]: ((28672, 8192), 0, True),
}


def peak_bytes(build: Callable[[], Any]) -> tuple[int, Any]:
    """GPU bytes allocated at the peak of ``build()`` beyond those live before it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    made = build()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base, made


def old_way(full: tuple[int, int], dim: int, bias: bool) -> list[torch.Tensor]:
    """What the layers did before: the fp32 master drawn on the GPU, rank 0's slice copied."""
    part = full[dim] // 8
    shape = (part, full[1]) if dim == 0 else (full[0], part)
    weight = torch.empty(shape, dtype=torch.bfloat16, device=DEVICE)
    master = torch.empty(full, dtype=torch.float32, device=DEVICE)
    nn.init.xavier_normal_(master)
    weight.copy_(master.narrow(dim, 0, part))
    del master
    made = [weight]
    if bias:
        made.append(torch.zeros(part, dtype=torch.bfloat16, device=DEVICE))
    return made


def memory(name: str, build: Callable[[dict[str, Any]], nn.Module]) -> str:
    if not CUDA:
        raise Skip("needs CUDA")
    from torch.testing._internal.distributed.fake_pg import FakeStore

    full, dim, bias = SHARDS[name]
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
    try:
        before, old = peak_bytes(lambda: old_way(full, dim, bias))
        shard = sum(t.numel() * t.element_size() for t in old)
        del old
        start = time.perf_counter()
        kw = {"group": dist.group.WORLD, "device": DEVICE, "dtype": torch.bfloat16}
        after, layer = peak_bytes(lambda: build(kw))
        seconds = time.perf_counter() - start
        params = sum(p.numel() * p.element_size() for p in layer.parameters())
        del layer
    finally:
        dist.destroy_process_group()
    if params != shard:
        raise AssertionError(f"the layer holds {params} B, the old shard {shard} B")
    verdict = f"shard {shard / 2**20:.0f} MiB; before {before / shard:.2f}x, after "
    verdict += f"{after / shard:.2f}x ({seconds:.1f} s to build)"
    if after > 1.25 * shard:
        raise AssertionError(verdict + ": above 1.25x")
    return verdict


# -- main -------------------------------------------------------------------------------------


def main() -> int:
    print(f"torch {torch.__version__}, device {DEVICE}, backend {BACKEND}", flush=True)
    if CUDA:
        print(f"GPU {torch.cuda.get_device_name(0)}, NCCL {torch.cuda.nccl.version()}")  # type: ignore[no-untyped-call]
    for bound in (True, False):
        label = "bound" if bound else "unbound"
        try:
            with world(bound):
                section_a(bound)
                run(
                    "b", f"{label} install() + Megatron initialize_model_parallel", megatron_install
                )
                if bound or not CUDA:
                    for name, fn in FACADES.items():
                        run("c", f"{label} façade {name}", fn)
                    run("d", f"{label} layers at tp 1", layers_on_device)
        except Skip as why:
            record("a-d", label, "SKIP", str(why))
    for name, build in BIG:
        run("e", f"build {name} bf16 tp 8 rank 0", functools.partial(memory, name, build))
    failed = [row for row in ROWS if row[2] == "FAIL"]
    width = max(len(row[1]) for row in ROWS)
    print(f"\n{'':3} {'check':{width}}  result  detail")
    for section, check, status, detail in ROWS:
        print(f"{section:3} {check:{width}}  {status:6}  {detail}")
    counts = {s: sum(row[2] == s for row in ROWS) for s in ("PASS", "FAIL", "SKIP")}
    print(f"\n{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
