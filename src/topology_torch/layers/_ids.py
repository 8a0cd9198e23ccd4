"""Embedding ids outside the vocabulary are rejected exactly where ``torch.nn.Embedding`` does."""

from __future__ import annotations

import torch

from topology import TopologyError

from .._debug_checks import show as _show

__all__ = ["IdOutOfRangeError", "check_ids"]


class IdOutOfRangeError(TopologyError, IndexError):
    """An embedding id outside ``[0, num_embeddings)``.

    Both a :class:`~topology.TopologyError` and the ``IndexError`` that ``torch.nn.Embedding``
    raises on CPU, so ``except IndexError`` written for ``nn.Embedding`` keeps working. On CUDA
    the check is a device-side assertion (no host synchronisation): a bad id then surfaces as
    torch's asynchronous "device-side assert triggered" ``RuntimeError``, as with ``nn.Embedding``.

    >>> issubclass(IdOutOfRangeError, IndexError) and issubclass(IdOutOfRangeError, TopologyError)
    True
    """


def check_ids(ids: object, num_embeddings: int) -> torch.Tensor:
    """Return ``ids`` if it is an int32/int64 tensor of ids in ``[0, num_embeddings)``.

    On CPU the check is eager; on an accelerator it is ``torch._assert_async`` (no sync); on the
    meta device there are no values to check.

    Raises:
        TopologyError: ``ids`` is not an int32/int64 tensor.
        IdOutOfRangeError: (CPU) some id is negative or ``>= num_embeddings``.

    >>> import torch
    >>> check_ids(torch.tensor([0, 9]), 10).tolist()
    [0, 9]
    """
    if not isinstance(ids, torch.Tensor):
        raise TopologyError(
            f"ids({_show(ids)}) has type {type(ids).__name__}, not a tensor; pass an int64 tensor "
            "of ids"
        )
    if ids.dtype not in (torch.int64, torch.int32):
        raise TopologyError(
            f"ids have dtype {ids.dtype}; pass int64 or int32 ids, as torch.nn.Embedding needs"
        )
    if ids.device.type == "meta":
        return ids
    valid = f"[0, {num_embeddings}) for num_embeddings({num_embeddings})"
    if ids.device.type != "cpu":
        inside = ((ids >= 0) & (ids < num_embeddings)).all()
        torch._assert_async(inside, f"embedding ids outside {valid}")
        return ids
    bad = (ids < 0) | (ids >= num_embeddings)
    if bool(bad.any()):
        where = tuple(int(i) for i in bad.nonzero()[0])
        name = f"ids[{', '.join(map(str, where))}]" if where else "ids"
        count = int(bad.sum())
        raise IdOutOfRangeError(
            f"{name} = {int(ids[where])} is outside {valid} ({count} of {ids.numel()} ids are "
            f"out of range); pass ids in [0, {num_embeddings - 1}]"
        )
    return ids
