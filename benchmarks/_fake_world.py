"""What the process-group benchmarks share: a fake world and a count of group creations.

torch's ``fake`` backend simulates one rank of a world of any size (no data moves), so one
process can make the groups that rank would make and count its ``new_group``/``split_group``
calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore


@contextmanager
def fake_world(world: int, rank: int = 0) -> Iterator[None]:
    """A fake default group of ``world`` ranks, seen from ``rank``."""
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()


@contextmanager
def counting() -> Iterator[list[str]]:
    """The ``group_desc`` (``'None'`` when not given) of every ``new_group`` / ``split_group``
    call in the block, in order."""
    calls: list[str] = []
    originals = {name: getattr(dist, name) for name in ("new_group", "split_group")}

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            calls.append(str(kwargs.get("group_desc")))
            return original(*args, **kwargs)

        return counted

    for name, original in originals.items():
        setattr(dist, name, wrap(original))
    try:
        yield calls
    finally:
        for name, original in originals.items():
            setattr(dist, name, original)
