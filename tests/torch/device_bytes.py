"""Count the bytes live on one device while a block runs, without that device's allocator.

A ``TorchDispatchMode`` sees every tensor an aten op returns; each new storage on the watched
device adds its bytes, and a finalizer on the storage (torch keeps one Python object per storage
while it lives) subtracts them when the storage dies, so views and parameters that share a
storage count once, for as long as any of them lives. Kernels' internal scratch tensors are not
seen (they never reach Python); the GPU check script measures those with the CUDA allocator.

>>> import torch
>>> with DeviceBytes("meta") as seen:
...     a = torch.empty(4, device="meta")
...     del a
...     b = torch.empty(2, device="meta")
>>> seen.peak, seen.live
(16, 8)
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["DeviceBytes"]


class DeviceBytes(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """While active, ``live`` is the bytes of the storages created on ``device``; ``peak`` its
    maximum. Storages made before the block are not counted."""

    def __init__(self, device: str | torch.device) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.device = torch.device(device)
        self.live = 0
        self.peak = 0
        self._sizes: dict[int, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor) and tensor.device.type == self.device.type:
                self._track(tensor.untyped_storage())
        return out

    def _track(self, storage: torch.UntypedStorage) -> None:
        key = id(storage)
        if key in self._sizes:
            return
        self._sizes[key] = storage.nbytes()
        self.live += storage.nbytes()
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self.live -= self._sizes.pop(key)
