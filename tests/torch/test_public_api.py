"""The public names of ``topology_torch`` are pinned: a change here is a deliberate API change."""

from __future__ import annotations

import topology_torch
from topology import TopologyError

EXPECTED = [
    "ColumnParallelLinear",
    "IdOutOfRangeError",
    "ParallelEmbedding",
    "ProcessGroups",
    "RowParallelLinear",
    "VocabParallelEmbedding",
    "current",
    "destroy",
    "initialize",
    "is_initialized",
    "mp_copy",
    "mp_gather",
    "mp_reduce",
    "mp_scatter",
    "ops",
    "recovery",
]


def test_all_is_pinned_and_sorted() -> None:
    """topology_torch.__all__ is exactly the pinned list, sorted."""
    assert topology_torch.__all__ == EXPECTED
    assert sorted(topology_torch.__all__) == topology_torch.__all__


def test_every_public_name_exists() -> None:
    """Every name in __all__ is importable from the package root."""
    for name in topology_torch.__all__:
        assert getattr(topology_torch, name) is not None


def test_out_of_range_ids_are_in_both_families() -> None:
    """IdOutOfRangeError is caught by ``except TopologyError`` and by ``except IndexError``."""
    assert issubclass(topology_torch.IdOutOfRangeError, TopologyError)
    assert issubclass(topology_torch.IdOutOfRangeError, IndexError)


def test_the_weight_initialiser_lives_in_layers() -> None:
    """``initialize_model_parallel_affine_weight_`` is documented in ``topology_torch.layers``;
    the root still imports it for old code but does not list it."""
    from topology_torch import layers

    assert "initialize_model_parallel_affine_weight_" in layers.__all__
    assert "initialize_model_parallel_affine_weight_" not in topology_torch.__all__
    old = getattr(topology_torch, "initialize_model_parallel_affine_weight_")  # noqa: B009
    assert old is layers.initialize_model_parallel_affine_weight_
