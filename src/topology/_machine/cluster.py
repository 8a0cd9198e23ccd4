"""Cluster: the machine a layout will run on (GPUs per node, nodes, NVLink domains)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from .._args import check_index, check_size

__all__ = ["Cluster"]


def _optional_size(name: str) -> Callable[[Any, Any, Any], None]:
    def validator(_: Any, __: Any, value: Any) -> None:
        if value is not None:
            check_size(name, value)

    return validator


@attrs.frozen
class Cluster:
    """Where ranks land: rank ``r`` runs on node ``r // gpus_per_node``.

    ``nvlink_domain`` is how many consecutive GPUs share one NVLink fabric (8 on a DGX H100
    node, 72 on a GB200 NVL72 rack); by default it is the node.

    >>> cluster = Cluster(gpus_per_node=8, nodes=4)
    >>> cluster.node_of(13), cluster.local_gpu(13), cluster.world_size
    (1, 5, 32)
    """

    gpus_per_node: int = attrs.field(validator=lambda _, __, v: check_size("gpus_per_node", v))
    nodes: int | None = attrs.field(default=None, validator=_optional_size("nodes"))
    nvlink_domain: int | None = attrs.field(default=None, validator=_optional_size("nvlink_domain"))

    @property
    def domain_size(self) -> int:
        """GPUs per NVLink domain (the node when not given)."""
        return self.nvlink_domain or self.gpus_per_node

    @property
    def world_size(self) -> int | None:
        """``nodes * gpus_per_node``, or None when the node count is open."""
        return None if self.nodes is None else self.nodes * self.gpus_per_node

    def node_of(self, rank: int) -> int:
        """The node that runs ``rank``."""
        return check_index("rank", rank, at_most=None) // self.gpus_per_node

    def local_gpu(self, rank: int) -> int:
        """The GPU index of ``rank`` inside its node."""
        self.node_of(rank)
        return rank % self.gpus_per_node

    def domain_of(self, rank: int) -> int:
        """The NVLink domain that holds ``rank``."""
        self.node_of(rank)
        return rank // self.domain_size
