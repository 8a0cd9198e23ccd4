"""The fail-fast check that every rank creates the same groups (private).

One all-gather of three int64 numbers on the default group: a fingerprint of the arguments, how
many times this process created ``ProcessGroups`` before, and torch's group counter. Ranks that
disagree get a ``TopologyError`` naming them, instead of a hang inside ``new_group``.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from topology import TopologyError

__all__ = ["check_agreement", "fingerprint"]


def fingerprint(facts: Any) -> int:
    """A signed 64-bit digest of JSON-able ``facts``."""
    text = json.dumps(facts, sort_keys=True, default=str)
    digest = hashlib.sha1(text.encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _device() -> torch.device:
    backend = str(dist.get_backend())
    if "nccl" in backend and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def check_agreement(
    digest: int, generation: int, description: str, *, same_group_count: bool
) -> None:
    """Raise ``TopologyError`` on every rank unless all ranks passed equal numbers.

    SPMD contract: call on every rank of the default group. Under the ``fake`` backend (no data
    moves) and in a world of one rank there is nothing to compare.
    """
    if dist.get_world_size() == 1 or str(dist.get_backend()) == "fake":
        return
    count = int(c10d._world.group_count) if same_group_count else 0
    mine = torch.tensor([digest, generation, count], dtype=torch.int64, device=_device())
    rows = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, mine)
    facts = [tuple(int(v) for v in row.tolist()) for row in rows]
    if len(set(facts)) == 1:
        return
    # Every rank sees the same rows, so every rank takes this branch: the second gather is safe.
    texts: list[Any] = [None] * len(facts)
    dist.all_gather_object(texts, description)
    for column, what in ((0, "arguments"), (1, "generation"), (2, "group count")):
        values = [row[column] for row in facts]
        common, _ = Counter(values).most_common(1)[0]
        odd = [r for r, v in enumerate(values) if v != common]
        if not odd:
            continue
        good = values.index(common)
        if what == "arguments":
            raise TopologyError(
                f"{_ranks(odd)} called ProcessGroups.create with different arguments than "
                f"rank {good}: rank {odd[0]} has {texts[odd[0]]} but rank {good} has "
                f"{texts[good]}; call create on every rank with equal arguments"
            )
        if what == "generation":
            raise TopologyError(
                f"{_ranks(odd)} created ProcessGroups {values[odd[0]]} times before this call "
                f"but rank {good} did {common} times; create and destroy groups on every rank "
                "in the same order"
            )
        raise TopologyError(
            f"{_ranks(odd)} registered {values[odd[0]]} torch process groups before this call "
            f"but rank {good} registered {common}, so strategy 'all' would give one group "
            "different names on different ranks; use strategy='local'"
        )
