"""ml-starter's ``ml.utils.parallel`` API over a :class:`topology.Topology` (a façade).

Layout ``tp-pp-dp`` (``Topology.ml_starter``): model parallelism is tp, ranks vary fastest along
it, then along pp, then dp. For 8 GPUs with ``init_parallelism(2, 2)`` the model-parallel groups
are [0, 1], [2, 3], [4, 5], [6, 7], the pipeline groups [0, 2], [1, 3], [4, 6], [5, 7] and the
data-parallel groups [0, 4], [1, 5], [2, 6], [3, 7]; every rank gets the group containing it
(ml-starter's own code hands ranks 2-7 the wrong groups). SPMD contract: call
``init_parallelism`` and ``reset_parallelism`` on every rank, with equal arguments, in order.

>>> from topology_torch.compat import ml  # doctest: +SKIP
>>> ml.init_parallelism(2, 2)  # doctest: +SKIP
>>> ml.parallel_group_info().mp.global_ranks  # doctest: +SKIP
[0, 1]
"""

from __future__ import annotations

from typing import Any

import attrs
import torch
import torch.distributed as dist

from topology import Topology, TopologyError

from .. import _default
from .._process_groups import refuse, require_initialized

__all__ = [
    "ParallismError",
    "default_group_info",
    "init_parallelism",
    "parallel_group_info",
    "parallelism_is_initialized",
    "reset_parallelism",
]


OWNER = _default.Owner("compat.ml", "init_parallelism()", "reset_parallelism()")


class ParallismError(TopologyError):
    """Invalid parallelism settings (ml-starter's name; also a ``TopologyError``)."""


@attrs.frozen(eq=False)
class _GroupInfo:
    """One process group as ml-starter describes it, with its three collectives."""

    group: Any
    global_ranks: list[int]
    rank: int
    world_size: int

    def reduce(self, tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM) -> torch.Tensor:
        """All-reduce ``tensor`` in place over the group and return it."""
        if self.world_size == 1:
            return tensor
        dist.all_reduce(tensor, op=op, group=self.group)
        return tensor

    def split(self, tensor: torch.Tensor, dim: int = 0) -> torch.Tensor:
        """This rank's slice of ``tensor`` along ``dim`` (one of ``world_size`` equal parts)."""
        size = tensor.shape[dim]
        if size % self.world_size:
            raise ParallismError(
                f"dim {dim} of size {size} does not split into {self.world_size} equal parts "
                f"({size} % {self.world_size} = {size % self.world_size}); pad it to a multiple"
            )
        part = size // self.world_size
        return tensor.narrow(dim, self.rank * part, part)

    def gather(self, tensor: torch.Tensor, dim: int = 0) -> torch.Tensor:
        """The group's tensors concatenated along ``dim`` in group order (inverse of split)."""
        if self.world_size == 1:
            return tensor
        parts = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(parts, tensor.contiguous(), group=self.group)
        return torch.cat(parts, dim=dim)


@attrs.frozen(eq=False)
class _GroupsInfos:
    """The model-, pipeline- and data-parallel groups of this rank."""

    mp: _GroupInfo
    pp: _GroupInfo
    dp: _GroupInfo


def init_parallelism(
    model_parallelism: int = 1,
    pipeline_parallelism: int = 1,
    *,
    mp_backend: str | None = None,
    pp_backend: str | None = None,
    dp_backend: str | None = None,
) -> None:
    """Create the model-, pipeline- and data-parallel groups of the whole default group.

    Raises:
        ParallismError: invalid sizes (with the arithmetic), or already initialized.
    """
    try:
        require_initialized("init_parallelism")
        try:
            topology = Topology.ml_starter(
                dist.get_world_size(), model_parallelism, pipeline_parallelism
            )
        except TopologyError as problem:
            refuse(problem)  # every rank hears of it, nobody waits
        _default.claim(
            OWNER,
            topology,
            backends={"tp": mp_backend, "pp": pp_backend, "dp": dp_backend},
            kinds=("tp", "pp", "dp"),
            gloo=(),
        )
    except ParallismError:
        raise
    except TopologyError as error:
        raise ParallismError(str(error)) from error


def _info(kind: str) -> _GroupInfo:
    groups = _default.owned(OWNER)
    return _GroupInfo(
        group=groups.group(kind),
        global_ranks=list(groups.ranks(kind)),
        rank=groups.rank(kind),
        world_size=groups.size(kind),
    )


def parallel_group_info() -> _GroupsInfos:
    """This rank's groups; ``ParallismError`` if ``init_parallelism`` has not run."""
    try:
        return _GroupsInfos(mp=_info("tp"), pp=_info("pp"), dp=_info("dp"))
    except ParallismError:
        raise
    except TopologyError as error:
        raise ParallismError(str(error)) from error


def default_group_info() -> _GroupInfo | None:
    """The whole default group as a group info, or None when torch.distributed is not set up."""
    if not dist.is_available() or not dist.is_initialized():
        return None
    size = dist.get_world_size()
    return _GroupInfo(dist.group.WORLD, list(range(size)), dist.get_rank(), size)


def parallelism_is_initialized() -> bool:
    """Whether ``init_parallelism`` has run (and ``reset_parallelism`` has not since)."""
    return _default.held_by(OWNER) is not None


def reset_parallelism() -> None:
    """Destroy the groups ``init_parallelism`` made (a no-op when none).

    Raises:
        ParallismError: the default groups were made by another façade (they are left alone).
    """
    try:
        _default.release(OWNER)
    except TopologyError as error:
        raise ParallismError(str(error)) from error
