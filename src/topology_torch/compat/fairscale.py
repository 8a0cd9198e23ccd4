"""fairscale's ``nn.model_parallel`` (``initialize`` and ``layers``) over a Topology (a façade).

Switch the import and keep the code::

    # from fairscale.nn.model_parallel import initialize as mpu, layers
    from topology_torch.compat import fairscale as mpu, fairscale as layers

Layout ``tp-cp-pp-dp`` (``Topology.ezpz``), fairscale's own: ranks vary fastest along model
parallelism, then context, pipeline and data parallelism, like
``torch.arange(W).reshape(dp, pp, cp, mp)``. For 8 ranks and ``initialize_model_parallel(2)``
the model-parallel groups are [0, 1], [2, 3], [4, 5], [6, 7] and the data-parallel groups
[0, 2, 4, 6], [1, 3, 5, 7]. SPMD contract: call ``initialize_model_parallel`` and
``destroy_model_parallel`` on every rank, with equal arguments, in the same order.

The layers are :mod:`topology_torch.layers`' (they take fairscale's ``init_method=`` and
``keep_master_weight_for_test=``) and use these groups when ``group`` is not given.
Misuse raises :class:`FacadeAssertionError` (a ``TopologyError`` and an ``AssertionError``, as
fairscale ``assert``s); getters before ``initialize_model_parallel`` raise
:class:`NotInitializedError` ("... is not initialized").

Deliberately different from fairscale: a ``model_parallel_size_`` larger than the world is an
error (fairscale silently shrinks it to the world size), and ``destroy_model_parallel`` releases
the communicators instead of only forgetting them.

>>> model_parallel_is_initialized()
False
>>> try:
...     get_model_parallel_group()
... except AssertionError as error:
...     print(type(error).__name__, "-", str(error)[:35])
NotInitializedError - compat.fairscale is not initialized
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch.distributed as dist

from topology import Topology, TopologyError

from .. import _default
from .._process_groups import ProcessGroups, refuse, require_initialized
from ..layers import (
    ColumnParallelLinear,
    ParallelEmbedding,
    RowParallelLinear,
    VocabParallelEmbedding,
)
from ..layers import initialize_affine_weight as _initialize_affine_weight
from ._errors import as_assertion, owned_groups

__all__ = [
    "ColumnParallelLinear",
    "ParallelEmbedding",
    "RowParallelLinear",
    "VocabParallelEmbedding",
    "_initialize_affine_weight",
    "destroy_model_parallel",
    "get_context_parallel_group",
    "get_context_parallel_rank",
    "get_context_parallel_ranks",
    "get_context_parallel_world_size",
    "get_data_parallel_group",
    "get_data_parallel_rank",
    "get_data_parallel_ranks",
    "get_data_parallel_world_size",
    "get_model_parallel_group",
    "get_model_parallel_rank",
    "get_model_parallel_src_rank",
    "get_model_parallel_world_size",
    "get_pipeline_parallel_group",
    "get_pipeline_parallel_ranks",
    "initialize_model_parallel",
    "model_parallel_is_initialized",
]

OWNER = _default.Owner(
    "compat.fairscale", "initialize_model_parallel()", "destroy_model_parallel()"
)


def initialize_model_parallel(
    model_parallel_size_: int,
    pipeline_length: int = 1,
    context_parallel_size: int = 1,
    *,
    model_parallel_backend: str | None = None,
    pipeline_backend: str | None = None,
    cp_backend: str | None = None,
    ddp_backend: str | None = None,
    timeout: timedelta | None = None,
) -> None:
    """Create the model-, context-, pipeline- and data-parallel groups of the default group.

    SPMD contract: call on every rank, with equal arguments, in the same order.

    Raises:
        FacadeAssertionError: torch.distributed is not initialized, sizes that do not divide the
            world (with the arithmetic; on every rank), or already initialized.
    """

    def create() -> None:
        require_initialized("initialize_model_parallel")
        try:
            topology = Topology.ezpz(
                dist.get_world_size(),
                tp=model_parallel_size_,
                pp=pipeline_length,
                cp=context_parallel_size,
            )
        except TopologyError as problem:
            refuse(problem)  # every rank hears of it, nobody waits
        _default.claim(
            OWNER,
            topology,
            kinds=("tp", "cp", "pp", "dp"),
            backends={
                "tp": model_parallel_backend,
                "cp": cp_backend,
                "pp": pipeline_backend,
                "dp": ddp_backend,
            },
            timeout=timeout,
            gloo=(),
        )

    as_assertion(create)


def model_parallel_is_initialized() -> bool:
    """Whether ``initialize_model_parallel`` has run (and no destroy since)."""
    return _default.held_by(OWNER) is not None


def destroy_model_parallel() -> None:
    """Destroy the groups (fairscale only forgot them; these are released); a no-op when none.

    Raises:
        FacadeAssertionError: the default groups were made by another façade (left alone).
    """
    as_assertion(lambda: _default.release(OWNER))


def _groups() -> ProcessGroups:
    return owned_groups(OWNER)


def get_model_parallel_group() -> Any:
    """The model- (tensor-) parallel group of this rank."""
    return _groups().group("tp")


def get_model_parallel_world_size() -> int:
    """The model-parallel size."""
    return _groups().size("tp")


def get_model_parallel_rank() -> int:
    """This rank's position in its model-parallel group."""
    return _groups().rank("tp")


def get_model_parallel_src_rank() -> int:
    """The global rank of position 0 in this rank's model-parallel group."""
    return _groups().ranks("tp")[0]


def get_data_parallel_group() -> Any:
    """The data-parallel group of this rank."""
    return _groups().group("dp")


def get_data_parallel_world_size() -> int:
    """The data-parallel size."""
    return _groups().size("dp")


def get_data_parallel_rank() -> int:
    """This rank's position in its data-parallel group."""
    return _groups().rank("dp")


def get_data_parallel_ranks() -> list[int]:
    """The global ranks of this rank's data-parallel group."""
    return list(_groups().ranks("dp"))


def get_pipeline_parallel_group() -> Any:
    """The pipeline group of this rank."""
    return _groups().group("pp")


def get_pipeline_parallel_ranks() -> list[int]:
    """The global ranks of this rank's pipeline group, in stage order."""
    return list(_groups().ranks("pp"))


def get_context_parallel_group() -> Any:
    """The context-parallel group of this rank."""
    return _groups().group("cp")


def get_context_parallel_ranks() -> list[int]:
    """The global ranks of this rank's context-parallel group."""
    return list(_groups().ranks("cp"))


def get_context_parallel_world_size() -> int:
    """The context-parallel size."""
    return _groups().size("cp")


def get_context_parallel_rank() -> int:
    """This rank's position in its context-parallel group."""
    return _groups().rank("cp")
