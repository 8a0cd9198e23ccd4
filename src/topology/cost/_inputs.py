"""Resolving a model or hardware given by name or file, for the CLI and scripts (private)."""

from __future__ import annotations

import os

from .._args import show
from .._datafile import read_data
from .._errors import TopologyError
from ._hardware import HARDWARE, Hardware
from ._model import MODELS, Model

__all__ = ["load_hardware", "load_model"]


def load_model(spec: str | os.PathLike[str]) -> Model:
    """A preset name (``llama-70b``) or the path of a JSON file of :class:`Model` fields.

    The file is read by ``topology._datafile.read_data``: a regular file of at most 1 MiB holding
    one JSON object; ``Infinity``, ``NaN``, integers of more than 30 digits, duplicate keys and
    deep nesting are refused.

    >>> load_model("llama-7b").layers
    32

    Raises:
        TopologyError: for an unknown preset, an unreadable or invalid file, or invalid fields.
    """
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if not isinstance(spec, str):
        raise TopologyError(
            f"model must be a preset name ({', '.join(MODELS)}) or the path of a .json file, "
            f"got {show(spec)} ({type(spec).__name__})"
        )
    if spec in MODELS:
        return MODELS[spec]
    if not spec.endswith(".json"):
        raise TopologyError(
            f"unknown model {show(spec)}; use a preset ({', '.join(MODELS)}) or a .json file of "
            "Model fields"
        )
    data = read_data(spec, f"model file {show(spec)}")
    if not isinstance(data, dict):
        raise TopologyError(
            f"model file {show(spec)} must hold an object of Model fields, "
            f"got {type(data).__name__}"
        )
    try:
        return Model.from_dict(data)
    except TopologyError as error:
        raise TopologyError(f"model file {show(spec)}: {error}") from None


def load_hardware(name: str) -> Hardware:
    """A hardware preset by name (``toy``, ``h100``, ``a100``).

    >>> load_hardware("toy").compute_rate
    10.0
    """
    if not isinstance(name, str) or name not in HARDWARE:
        raise TopologyError(f"unknown hardware {show(name)}; valid: {', '.join(HARDWARE)}")
    return HARDWARE[name]
