"""The device a mesh and the agreement exchange use follows the default group's backend, not
whether the machine has a GPU: a gloo world on a GPU host still moves CPU tensors."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests.torch.world import fake_world
from topology import Topology
from topology_torch import ProcessGroups
from topology_torch._device import collective_device


@pytest.mark.parametrize(
    ("backend", "cuda", "expected"),
    [
        ("nccl", True, torch.device("cuda", 3)),
        ("cpu:gloo,cuda:nccl", True, torch.device("cuda", 3)),
        ("gloo", True, torch.device("cpu")),
        ("fake", True, torch.device("cpu")),
        ("nccl", False, torch.device("cpu")),
        ("gloo", False, torch.device("cpu")),
    ],
)
def test_the_device_follows_the_backend(
    backend: str, cuda: bool, expected: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dist, "get_backend", lambda *_: backend)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert collective_device() == expected


def test_meshes_of_a_non_nccl_world_are_cpu_meshes_on_a_gpu_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both mesh builders default to the CPU on a world whose backend is not NCCL, even where
    torch sees a GPU (here: says it does)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with fake_world(8, 5):
        groups = ProcessGroups.create(Topology(8, tp=2, pp=2), kinds=("tp", "dp", "pp"), gloo=())
        assert groups.device_mesh("dp", "tp").device_type == "cpu"
        assert groups.world_mesh("pp", "dp", "tp").device_type == "cpu"
        assert groups.device_mesh("tp", device_type="meta").device_type == "meta"
        groups.destroy()
