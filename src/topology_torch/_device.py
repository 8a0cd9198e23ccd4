"""The device the default group's collectives run on (private)."""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["collective_device"]


def collective_device() -> torch.device:
    """This rank's CUDA device when the default group's backend is NCCL (and CUDA is there),
    else the CPU: gloo (and torch's ``fake`` backend) move CPU tensors whatever the machine has,
    so a gloo world on a GPU host still gets CPU meshes and CPU exchanges."""
    if "nccl" in str(dist.get_backend()) and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
