"""Deterministic names for locally synchronised groups (private).

torch names a group made with ``new_group(..., use_local_synchronization=True)``
``sha1(ranks, len(registered groups))``. Members that have registered different numbers of groups
before (overlapping groups, a middle pipeline stage without an embedding group, groups made
earlier by other code) compute different names, rendezvous under different store prefixes and
hang. While we create a group we substitute a name that depends only on what every member knows:
the create call's generation, the communicator's ranks, backend and timeout.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import torch.distributed.distributed_c10d as c10d

__all__ = ["group_name", "named", "supported"]


def supported() -> bool:
    """Whether this torch derives local group names in the way :func:`named` replaces."""
    return callable(getattr(c10d, "_hash_ranks_to_str", None))


def group_name(
    generation: str, ranks: tuple[int, ...], backend: str | None, timeout: timedelta | None
) -> str:
    """A name equal on every member and unique per create call and communicator."""
    wait = None if timeout is None else timeout.total_seconds()
    text = f"rank-topology/{generation}/{backend}/{wait}/{'_'.join(map(str, ranks))}"
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()


@contextmanager
def named(name: str) -> Iterator[None]:
    """Within this block, a locally synchronised ``new_group`` is called ``name``."""
    original = c10d._hash_ranks_to_str
    c10d._hash_ranks_to_str = lambda ranks: name
    try:
        yield
    finally:
        c10d._hash_ranks_to_str = original
