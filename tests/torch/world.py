"""Worlds for the adapter's tests: a real multi-process gloo world (fresh rank processes forked
from a server that imported torch once, a file store), or one rank of a ``fake`` world in this
process (no data moves) for group-creation tests.

>>> run_world(4, _example)  # doctest: +SKIP
>>> with fake_world(8, 3): ...  # doctest: +SKIP
"""

from __future__ import annotations

import os
import signal
import socket
import tempfile
import time
import traceback
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = ["as_cpu_host", "fake_world", "run_world"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_PRELOAD = [
    "torch",
    "torch.distributed",
    "torch.distributed.tensor",
    "torch._dynamo",
    "torch._inductor.compile_fx",
    "pytest",
    "hypothesis",
    "topology",
    "topology_torch",
]
"""What the fork server imports once, so that no rank imports it again (megatron is left out:
ranks choose its version; the torch modules megatron-core imports are in: 3 of its 3.5 s)."""


def as_cpu_host() -> None:
    """In a rank process of a gloo world: make Megatron build and run its CPU models as on a
    machine without CUDA, also where torch sees a GPU (``torch.cuda.is_available`` says no,
    ``current_device`` is the CPU, where Megatron puts its routers' buffers, and ``.cuda()``
    keeps a tensor where it is, as Megatron's tied-embedding setup calls it)."""
    import torch

    torch.cuda.is_available = lambda: False  # type: ignore[assignment]
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]


def context() -> Any:
    """Ranks are forked from one server that has imported :data:`_PRELOAD` (seconds per rank
    under spawn); each rank is still a fresh process with the caller's environment and path.
    ``benchmarks/bench_recovery.py`` replaces it to time ranks started by spawn."""
    forkserver = mp.get_context("forkserver")
    forkserver.set_forkserver_preload(_PRELOAD)
    return forkserver


def _entry(
    rank: int,
    world_size: int,
    init_method: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    errors: Any,
    environ: dict[str, str] | None = None,
) -> None:
    if environ is not None:  # the caller's, as a spawned rank would inherit it
        os.environ.clear()
        os.environ.update(environ)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    if init_method.startswith("agent://"):  # a client of the store the parent hosts
        client = _client(init_method)
        dist.init_process_group("gloo", store=client, rank=rank, world_size=world_size)
    else:
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size)
    try:
        # every rank has connected to every other before any runs fn: a rank that returns at
        # once (and exits) must not close a connection another rank is still opening
        dist.barrier()
        fn(rank, world_size, *args)
    except BaseException:
        errors.put((rank, traceback.format_exc()))
        raise
    finally:
        if dist.is_initialized():  # fn may have left it (a growth makes a new one)
            dist.destroy_process_group()


JOIN = "test/join"
"""The key a rank sets on the parent's store (``store="agent"``) to have the joining processes
started."""


def _client(address: str) -> Any:
    host, port = address.removeprefix("agent://").rsplit(":", 1)
    return dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=60))


def _join_entry(
    index: int,
    address: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    errors: Any,
    environ: dict[str, str],
) -> None:
    """A process started later: no default group; ``fn(index, store, *args)``."""
    os.environ.clear()
    os.environ.update(environ)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    try:
        fn(index, _client(address), *args)
    except BaseException:
        errors.put((1000 + index, traceback.format_exc()))
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_world(
    world_size: int,
    fn: Callable[..., Any],
    *args: Any,
    timeout: float = 120,
    killed: Collection[int] = (),
    store: str = "file",
    joining: int = 0,
    join: Callable[..., Any] | None = None,
) -> None:
    """Call ``fn(rank, world_size, *args)`` on ``world_size`` new gloo ranks; re-raise failures.

    ``fn`` must be a module-level function (it is pickled into each process). The default group
    is initialised before and destroyed after ``fn``. The ranks in ``killed`` must die of
    SIGKILL (a test of a lost rank kills it on purpose); every other rank must exit with 0.
    ``store="tcp"`` meets on a TCPStore hosted by rank 0 instead of a file; ``store="agent"`` on
    one this process hosts (as torchrun's agent does), which outlives every rank. With
    ``joining``, once a rank sets :data:`JOIN` on that store, ``joining`` more processes start
    and call ``join(index, store, *args)`` (a client of the store, no default group).
    """
    starter = context()
    errors = starter.SimpleQueue()
    environ = dict(os.environ)
    agent = None
    with tempfile.TemporaryDirectory() as folder:
        if store == "agent":
            agent = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
            init_method = f"agent://127.0.0.1:{agent.port}"
        elif store == "tcp":
            init_method = f"tcp://127.0.0.1:{_free_port()}"
        else:
            init_method = f"file://{os.path.join(folder, 'store')}"
        processes = [
            starter.Process(
                target=_entry,
                args=(rank, world_size, init_method, fn, args, errors, environ),
                daemon=True,
            )
            for rank in range(world_size)
        ]
        for process in processes:
            process.start()
        started = time.monotonic()
        if joining:
            assert agent is not None and join is not None, "joining needs store='agent' and join"
            while not agent.check([JOIN]) and any(p.is_alive() for p in processes):
                if time.monotonic() - started > timeout:
                    break
                time.sleep(0.02)
            if agent.check([JOIN]):
                late = [
                    starter.Process(
                        target=_join_entry,
                        args=(index, init_method, join, args, errors, environ),
                        daemon=True,
                    )
                    for index in range(joining)
                ]
                for process in late:
                    process.start()
                agent.set("test/spawned", repr(time.time()))
                processes += late
        for process in processes:
            process.join(timeout)
        alive = [p for p in processes if p.is_alive()]
        for process in alive:
            process.kill()
        failures = []
        while not errors.empty():
            failures.append(errors.get())
        if failures:
            rank, text = sorted(failures)[0]
            raise AssertionError(f"rank {rank} of {world_size} failed:\n{text}")
        if alive:
            raise AssertionError(f"{len(alive)} of {world_size} ranks hung past {timeout}s")
        expected = [-signal.SIGKILL if rank in killed else 0 for rank in range(len(processes))]
        bad = {
            rank: p.exitcode
            for rank, (p, code) in enumerate(zip(processes, expected, strict=True))
            if p.exitcode != code
        }
        if bad:
            raise AssertionError(f"ranks exited with codes {bad} (rank: code), expected {expected}")


@contextmanager
def fake_world(world_size: int, rank: int) -> Iterator[None]:
    """Be ``rank`` of a fake default group of ``world_size`` ranks; release every group after."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    import topology_torch

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        topology_torch.destroy()
        dist.destroy_process_group()
