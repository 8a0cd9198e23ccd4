"""Hardware: how fast one GPU computes and how fast its links move data (private)."""

from __future__ import annotations

import attrs

from .._errors import TopologyError
from ._fields import (
    amount,
    as_float,
    check_amount,
    check_flag,
    instance_of,
    optional,
    positive,
    text,
)

__all__ = ["A100_NODE", "H100_NODE", "HARDWARE", "TOY_GPU", "Hardware", "Link"]


@attrs.frozen
class Link:
    """One hop of the alpha-beta model: ``latency`` seconds (alpha) plus ``size / bandwidth``.

    ``bandwidth`` is in data units per second (bytes for real hardware), per GPU and direction.

    >>> Link(latency=0.05, bandwidth=100.0).time(500.0)
    5.05
    """

    latency: float = attrs.field(converter=as_float, validator=amount)
    bandwidth: float = attrs.field(converter=as_float, validator=positive)

    @property
    def seconds_per_unit(self) -> float:
        """Beta: the time to move one data unit."""
        return 1.0 / self.bandwidth

    def time(self, size: float) -> float:
        """``latency + size / bandwidth``: one message of ``size`` units over this link."""
        return self.latency + check_amount("size", size) / self.bandwidth


@attrs.frozen
class Hardware:
    """A GPU and its two kinds of link: ``intra`` inside a fast domain (NVLink), ``inter`` across.

    Args:
        name: a short label.
        compute_rate: peak work units per second per GPU (FLOP/s for real hardware).
        efficiency: the fraction of ``compute_rate`` a training step achieves (MFU).
        intra: the link between GPUs of one node / NVLink domain.
        inter: the link between GPUs of different nodes.
        memory: bytes of device memory per GPU, or None to skip the memory check.

    >>> TOY_GPU.compute_time(20.0)
    2.0
    """

    name: str = attrs.field(validator=text)
    compute_rate: float = attrs.field(converter=as_float, validator=positive)
    intra: Link = attrs.field(validator=instance_of(Link, "a Link, e.g. Link(5e-6, 450e9)"))
    inter: Link = attrs.field(validator=instance_of(Link, "a Link, e.g. Link(10e-6, 50e9)"))
    efficiency: float = attrs.field(default=1.0, converter=as_float, validator=positive)
    memory: float | None = attrs.field(
        default=None, converter=as_float, validator=optional(positive)
    )

    def __attrs_post_init__(self) -> None:
        if self.efficiency > 1:
            raise TopologyError(
                f"efficiency must be in (0, 1], got {self.efficiency!r}; it is a fraction of peak"
            )
        if self.compute_rate * self.efficiency == 0:
            raise TopologyError(
                f"compute_rate ({self.compute_rate!r}) * efficiency ({self.efficiency!r}) is 0 "
                "in floating point; give a rate that is not vanishingly small"
            )

    def compute_time(self, work: float) -> float:
        """Seconds to do ``work`` units at ``compute_rate * efficiency``."""
        return check_amount("work", work) / (self.compute_rate * self.efficiency)

    def link(self, crosses_nodes: bool) -> Link:
        """``inter`` if a group crosses nodes (or NVLink domains), else ``intra``."""
        return self.inter if check_flag("crosses_nodes", crosses_nodes) else self.intra


_TOY_LINK = Link(latency=0.05, bandwidth=100.0)

TOY_GPU = Hardware("toy", compute_rate=10.0, intra=_TOY_LINK, inter=_TOY_LINK)
"""Seed 003's simulated GPU: 0.1 s per compute unit, 0.05 s latency, 0.01 s per data unit.

One link for everything (the toy has no nodes) and no memory limit.
"""

H100_NODE = Hardware(
    "h100",
    compute_rate=989e12,
    efficiency=0.4,
    intra=Link(latency=5e-6, bandwidth=450e9),
    inter=Link(latency=10e-6, bandwidth=50e9),
    memory=80e9,
)
"""An 8-GPU H100 SXM node (DGX H100) on 400 Gb/s InfiniBand.

Figures: 989 TFLOP/s dense BF16 and 80 GB HBM3 per GPU (NVIDIA H100 datasheet); NVLink 4 at
900 GB/s per GPU both directions, so 450 GB/s each way (NVIDIA NVLink page); one ConnectX-7
NDR 400 Gb/s = 50 GB/s NIC per GPU (DGX H100 user guide). Latencies are NCCL's order of magnitude
(a few microseconds in a node, about ten across InfiniBand); 40 % MFU is typical of large
Megatron runs (Narayanan et al. 2021 report 44-52 % on A100).
"""

A100_NODE = Hardware(
    "a100",
    compute_rate=312e12,
    efficiency=0.45,
    intra=Link(latency=5e-6, bandwidth=300e9),
    inter=Link(latency=10e-6, bandwidth=25e9),
    memory=80e9,
)
"""An 8-GPU A100 SXM 80 GB node (DGX A100) on 200 Gb/s HDR InfiniBand.

Figures: 312 TFLOP/s dense BF16 (NVIDIA A100 datasheet); NVLink 3 at 600 GB/s per GPU both
directions, 300 GB/s each way; one HDR 200 Gb/s = 25 GB/s NIC per GPU (DGX A100 user guide).
"""

HARDWARE = {hardware.name: hardware for hardware in (TOY_GPU, H100_NODE, A100_NODE)}
"""The presets by name."""
