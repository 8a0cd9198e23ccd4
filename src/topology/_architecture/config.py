"""Reading a Hugging Face ``config.json`` into an :class:`Architecture` (private).

The config's ``architectures[0]`` picks its row of :data:`.families.FAMILIES`; the row's reads
turn config keys into fields, by the parsers of :data:`PARSERS`. Standard library ``json`` only
(through ``topology._datafile``: a regular file of at most 1 MiB).

>>> row = model_from_config({"architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 2,
...     "hidden_size": 64, "vocab_size": 128, "num_attention_heads": 4,
...     "num_key_value_heads": 2, "intermediate_size": 96, "tie_word_embeddings": True})
>>> row.family, row.head_dim, row.qkv_bias, row.tied_embeddings
('qwen2', 16, True, True)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from .._args import show
from .._datafile import read_data
from .._errors import TopologyError
from .architecture import Architecture
from .families import ALIASES, FAMILIES, Family, Read

__all__ = ["PARSERS", "model_from_config", "read_model_config"]

_ABSENT = object()


def _supported() -> str:
    return ", ".join(row.hf_class for row in FAMILIES.values())


def _bad(key: str, value: object, rule: str, label: str) -> TopologyError:
    return TopologyError(
        f"{label} key {key!r} must be {rule}, got {show(value)} (families read: {_supported()})"
    )


def _value(config: Mapping[str, Any], key: str, default: Any) -> Any:
    """``config[key]`` or its alias, ``default`` when absent (``_ABSENT`` if required)."""
    for spelling in (key, *ALIASES.get(key, ())):
        if spelling in config:
            return config[spelling]
    return default


def _int(key: str, value: object, minimum: int, label: str) -> int:
    if value is _ABSENT:
        raise TopologyError(f"{label} lacks key {key!r}; give it (families read: {_supported()})")
    if type(value) is not int or value < minimum:
        rule = "a positive int" if minimum else "a non-negative int"
        raise _bad(key, value, rule, label)
    return value


def _count(read: Read, config: Mapping[str, Any], label: str) -> Any:
    (key,) = read.keys
    return _int(key, _value(config, key, _ABSENT), 1, label)


def _experts(read: Read, config: Mapping[str, Any], label: str) -> Any:
    (key,) = read.keys
    value = _value(config, key, _ABSENT)
    if _int(key, value, 1, label) < 2:
        raise _bad(key, value, "an int >= 2 (a mixture of experts)", label)
    return value


def _index(read: Read, config: Mapping[str, Any], label: str) -> Any:
    (key,) = read.keys
    value = _value(config, key, read.default)
    return read.default if value is None else _int(key, value, 0, label)


def _flag(read: Read, config: Mapping[str, Any], label: str) -> Any:
    (key,) = read.keys
    value = _value(config, key, read.default)
    if type(value) is not bool:
        raise _bad(key, value, "true or false", label)
    return value


def _fixed(read: Read, config: Mapping[str, Any], label: str) -> Any:
    return read.default


def _product(read: Read, config: Mapping[str, Any], label: str) -> Any:
    total = 1
    for key in read.keys:
        value = _value(config, key, read.default)
        total *= read.default if value is None else _int(key, value, 0, label)
    return total


def _head_dim(read: Read, config: Mapping[str, Any], label: str) -> Any:
    given = _value(config, "head_dim", None)
    if given is not None:
        return _int("head_dim", given, 1, label)
    hidden = _int("hidden_size", _value(config, "hidden_size", _ABSENT), 1, label)
    heads = _int("num_attention_heads", _value(config, "num_attention_heads", _ABSENT), 1, label)
    if hidden % heads:
        raise _bad(
            "head_dim",
            None,
            f"given when num_attention_heads ({heads}) does not divide hidden_size ({hidden})",
            label,
        )
    return hidden // heads


def _counts(read: Read, config: Mapping[str, Any], label: str) -> Any:
    return tuple(_int(key, _value(config, key, _ABSENT), 1, label) for key in read.keys)


def _prefix(read: Read, config: Mapping[str, Any], label: str) -> Any:
    (key,) = read.keys
    value = _value(config, key, read.default)
    if not isinstance(value, list) or value != list(range(len(value))):
        raise _bad(key, value, "a list of the first layers [0, 1, ..., k - 1]", label)
    return len(value)


PARSERS: dict[str, Callable[[Read, Mapping[str, Any], str], Any]] = {
    "count": _count,
    "experts": _experts,
    "index": _index,
    "flag": _flag,
    "fixed": _fixed,
    "product": _product,
    "head_dim": _head_dim,
    "counts": _counts,
    "prefix": _prefix,
}
"""How a :class:`.families.Read` turns config values into a field, by its ``parse``."""


def _family(config: Mapping[str, Any], label: str) -> Family:
    """The row of the family ``config`` names in ``architectures``."""
    names = config.get("architectures")
    if not isinstance(names, list) or not names or not isinstance(names[0], str):
        raise TopologyError(
            f"{label} key 'architectures' must be a list naming the model class, got "
            f"{show(names)}; families read: {_supported()}"
        )
    found = next((row for row in FAMILIES.values() if row.hf_class == names[0]), None)
    if found is None:
        raise TopologyError(
            f"{label} names architecture {names[0]!r}, not a family this reads; "
            f"families read: {_supported()}"
        )
    return found


def model_from_config(config: object, label: str = "config") -> Architecture:
    """The :class:`Architecture` of a Hugging Face config, given as the dict of its JSON.

    Args:
        config: the parsed ``config.json``.
        label: how messages name the config (e.g. ``"config.json 'path'"``).

    Returns:
        The model's row, ``family`` set to its family's name; published counts are None.

    Raises:
        TopologyError: not a dict, an unsupported family, a missing or invalid key, or a key
            whose value the weight list cannot follow (named with the families read).

    >>> model_from_config({"architectures": ["GPT2LMHeadModel"]})
    Traceback (most recent call last):
    topology._errors.TopologyError: config names architecture 'GPT2LMHeadModel', not a family ...
    """
    if not isinstance(config, dict):
        raise TopologyError(
            f"{label} must hold one JSON object of config keys, got {type(config).__name__}"
        )
    family = _family(config, label)
    for key, wanted in family.requires:
        value = _value(config, key, wanted)
        if value != wanted or type(value) is not type(wanted):
            raise _bad(key, value, f"{show(wanted)} for {family.hf_class}", label)
    fields = {read.field: PARSERS[read.parse](read, config, label) for read in family.reads}
    try:
        return Architecture(**fields, family=family.name)
    except TopologyError as error:
        raise TopologyError(f"{label}: {error}") from None


def read_model_config(path: str | os.PathLike[str]) -> Architecture:
    """The :class:`Architecture` of a Hugging Face ``config.json``, or of the folder holding one.

    Reads the Llama, Qwen2, Qwen3, Qwen3-MoE, Mixtral and DeepSeek-V3 families (Kimi-K2's
    config is a DeepSeek-V3 config), by their ``architectures[0]`` class.

    Args:
        path: the ``config.json`` file, or a folder holding it (a checkpoint folder).

    Returns:
        The model's :class:`Architecture` (``parameters`` None: no published count).

    Raises:
        TopologyError: an unreadable file, not JSON, an unsupported family, a missing or
            invalid key: one line naming the file and the key.

    >>> import json, pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "config.json").write_text(json.dumps({
    ...     "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64,
    ...     "vocab_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
    ...     "intermediate_size": 96}))
    >>> read_model_config(folder).layers
    2
    """
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if isinstance(path, str) and os.path.isdir(path):
        path = os.path.join(path, "config.json")
    label = f"config.json {show(path)}"
    return model_from_config(read_data(path, label), label)
