"""ml-starter's ``ml.models.lora`` for the model-parallel layers of :mod:`topology_torch.layers`.

Switch the import and keep the code::

    # from ml.models.lora import maybe_lora
    from topology_torch.compat.ml_lora import maybe_lora

``lora(layer, r)`` adds a LoRA adapter ``(alpha / r) * B @ A`` to a :class:`ColumnParallelLinear`,
:class:`RowParallelLinear` or :class:`ParallelEmbedding` in place (``B`` starts at zero, so the
output is unchanged until it trains), freezes the layer's ``weight`` and returns the layer.
The adapters are split across the tp group like the weights they adapt (see each layer's
``add_lora_``).

Deliberately different from ml-starter: only these split layers are supported (ml-starter's
adapters for ``nn.Linear``, convolutions and RNNs are not reproduced), and ``dropout`` and
``merge`` are refused, with the reason, instead of being half-supported.

>>> from topology_torch.ops import _SingleRank
>>> layer = maybe_lora(ColumnParallelLinear(4, 6, group=_SingleRank()), 2)
>>> layer.lora_rank, layer.weight.requires_grad, layer.lora_a.requires_grad
(2, False, True)
"""

from __future__ import annotations

from typing import TypeVar

from torch import nn

from topology import TopologyError

from .._debug_checks import show as _show
from ..layers import ColumnParallelLinear, ParallelEmbedding, RowParallelLinear

__all__ = ["freeze_non_lora_", "lora", "maybe_lora"]

SUPPORTED = (ColumnParallelLinear, RowParallelLinear, ParallelEmbedding)
Layer = TypeVar("Layer", ColumnParallelLinear, RowParallelLinear, ParallelEmbedding)


def lora(
    module: Layer, r: int, alpha: float = 1.0, dropout: float = 0.0, merge: bool = False
) -> Layer:
    """Add a LoRA adapter of rank ``r`` (scale ``alpha / r``) to ``module`` in place; return it.

    Raises:
        TopologyError: ``module`` is not one of the supported split layers, it already has an
            adapter, a bad ``r`` or ``alpha``, or ``dropout``/``merge`` (not supported).
    """
    if not isinstance(module, SUPPORTED):
        names = ", ".join(cls.__name__ for cls in SUPPORTED)
        raise TopologyError(
            f"lora got a {type(module).__name__}; it adapts the model-parallel layers of "
            f"topology_torch.layers ({names})"
        )
    if dropout != 0.0:
        raise TopologyError(
            f"dropout({_show(dropout)}) is not supported by the split LoRA adapters; pass "
            "dropout=0.0 (or add nn.Dropout before the layer)"
        )
    if merge is not False:
        raise TopologyError(
            f"merge({_show(merge)}) is not supported: merging B @ A into a split weight would "
            "need the full adapter on every rank; pass merge=False"
        )
    module.add_lora_(r, alpha)
    module.weight.requires_grad_(False)
    return module


def maybe_lora(
    module: Layer,
    r: int | None,
    alpha: float = 1.0,
    dropout: float = 0.0,
    merge: bool = False,
    freeze: bool = True,
) -> Layer:
    """``lora(module, r, ...)`` when ``r`` is given; else ``module``, frozen when ``freeze``.

    Raises:
        TopologyError: as :func:`lora`.
    """
    if r is None:
        if freeze:
            module.requires_grad_(False)
        return module
    return lora(module, r, alpha, dropout, merge)


def freeze_non_lora_(module: nn.Module) -> None:
    """Freeze every parameter of ``module`` except the LoRA adapters (``lora_a``, ``lora_b``)."""
    for name, parameter in module.named_parameters():
        if name.rsplit(".", 1)[-1] not in ("lora_a", "lora_b"):
            parameter.requires_grad_(False)
