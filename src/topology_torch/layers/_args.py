"""Argument checks shared by the layers' constructors: every invalid value is a TopologyError."""

from __future__ import annotations

from typing import Any

import torch

from topology import TopologyError

from .._args import check_size
from .._debug_checks import show as _show

__all__ = ["FLOAT_DTYPES", "check_flag", "check_int", "check_size", "factory_kwargs"]

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_flag(name: str, value: object) -> bool:
    """Return ``value`` if it is ``True`` or ``False``, else raise :class:`TopologyError`."""
    if type(value) is not bool:
        raise TopologyError(f"{name}({_show(value)}) must be True or False")
    return value


def check_int(name: str, value: object) -> int:
    """Return ``value`` if it is an int (not a bool), else raise :class:`TopologyError`."""
    if type(value) is not int:
        raise TopologyError(f"{name}({_show(value)}) must be an int such as 0; pass a tensor dim")
    return value


def factory_kwargs(device: object, dtype: object) -> dict[str, Any]:
    """``device``/``dtype`` for the parameters, checked: a usable device and a floating dtype.

    Raises:
        TopologyError: ``dtype`` is not None or one of :data:`FLOAT_DTYPES`, or ``device`` is not
            None, a str, an int or a ``torch.device`` this process can allocate on.
    """
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype in FLOAT_DTYPES):
        raise TopologyError(
            f"dtype({_show(dtype)}) must be None or a floating dtype: torch.float16, "
            "torch.bfloat16, torch.float32 or torch.float64"
        )
    if device is None:
        return {"device": None, "dtype": dtype}
    if type(device) not in (str, int, torch.device):
        raise TopologyError(
            f"device({_show(device)}) must be None, a str, an int or a torch.device, such as 'cpu'"
        )
    try:  # torch raises RuntimeError, AssertionError, NotImplementedError... for unusable devices
        parsed = torch.device(device)  # type: ignore[call-overload]
        torch.empty(0, device=parsed, dtype=dtype)
    except Exception as error:
        reason = (str(error).splitlines() or [""])[0][:80]
        raise TopologyError(
            f"device({_show(device)}) cannot hold tensors in this process "
            f"({type(error).__name__}: {reason}); pass None, 'cpu' or an available accelerator"
        ) from None
    return {"device": parsed, "dtype": dtype}
