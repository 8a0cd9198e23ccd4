"""Resolving a model or hardware given by name or file, for the CLI and scripts (private)."""

from __future__ import annotations

import json

from .._errors import TopologyError
from ._hardware import HARDWARE, Hardware
from ._model import MODELS, Model

__all__ = ["load_hardware", "load_model"]


def load_model(spec: str) -> Model:
    """A preset name (``llama-70b``) or the path of a JSON file of :class:`Model` fields.

    >>> load_model("llama-7b").layers
    32
    """
    if spec in MODELS:
        return MODELS[spec]
    if not spec.endswith(".json"):
        raise TopologyError(
            f"unknown model {spec!r}; use a preset ({', '.join(MODELS)}) or a .json file of "
            "Model fields"
        )
    try:
        with open(spec, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as error:
        raise TopologyError(f"cannot read model file {spec!r}: {error.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise TopologyError(f"model file {spec!r} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise TopologyError(
            f"model file {spec!r} must hold an object of Model fields, got {type(data).__name__}"
        )
    return Model.from_dict(data)


def load_hardware(name: str) -> Hardware:
    """A hardware preset by name (``toy``, ``h100``, ``a100``)."""
    if name not in HARDWARE:
        raise TopologyError(f"unknown hardware {name!r}; valid: {', '.join(HARDWARE)}")
    return HARDWARE[name]
