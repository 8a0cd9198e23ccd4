"""Reading a modules file (``--modules FILE``): named layouts on their own rank spans.

The file is TOML (``.toml``) or JSON: a list ``module`` of tables, each a ``name`` and the
``--config`` fields of one layout (``world_size``, ``tp``, ``pp``, ... and ``rank_offset``, the
module's first rank)::

    [[module]]
    name = "vision"
    world_size = 8

    [[module]]
    name = "language"
    world_size = 8
    tp = 2
    pp = 2
    rank_offset = 8

(JSON: ``{"module": [{"name": "vision", "world_size": 8}, ...]}``.) A table with ``num_ranks``
is in Megatron MIMO's ``ModuleGridSpec`` spelling (``num_ranks``, ``gtp_remat``, ``expt_tp``,
``expt_gtp_remat``) and takes MIMO's defaults (``expt_tp`` 1, where ``etp`` defaults to ``tp``):
:func:`topology.mimo_layout`. The spans are all equal
(colocated modules) or disjoint and tile ``[0, world_size)``. Read through the same bounded
reader as ``--config``; every problem is one error that names the file and the module.
"""

from __future__ import annotations

from typing import Any

from .._args import show
from .._datafile import read_data
from .._errors import TopologyError
from .._megatron.topology import Topology
from .._modules.mimo import mimo_layout
from .._modules.module import Module
from .._modules.modules import Modules
from .common import TOPOLOGY_SCHEMA, CliError, check_table, one_line

__all__ = ["MAX_MODULES", "read_modules"]

MAX_MODULES = 64
"""The most modules a file may list (a MIMO model has a handful)."""


def read_modules(path: str) -> Modules:
    """The :class:`~topology.Modules` a modules file describes, every field checked.

    Raises:
        CliError: an unreadable or malformed file, an unknown or bad field, or modules that do
            not form a valid layout (the message names the file and the module).
    """
    label = f"--modules {path!r}" if len(path) <= 300 else f"--modules {show(path)}"
    try:
        data = read_data(path, label, toml=path.endswith(".toml"))
    except TopologyError as error:
        raise CliError(one_line(error)) from None
    if not isinstance(data, dict) or set(data) != {"module"}:
        keys = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise CliError(
            f"{label} must hold one list 'module' of tables ([[module]] in TOML), got "
            f"{show(keys)}; see topology check --help"
        )
    tables = data["module"]
    if not isinstance(tables, list) or not 1 <= len(tables) <= MAX_MODULES:
        count = len(tables) if isinstance(tables, list) else type(tables).__name__
        raise CliError(f"{label}: 'module' must list 1 to {MAX_MODULES} tables, got {count}")
    modules = [_module(label, index, table) for index, table in enumerate(tables)]
    try:
        return Modules(modules)
    except TopologyError as error:
        raise CliError(f"{label} holds invalid modules: {one_line(error)}") from None


def _module(label: str, index: int, table: Any) -> Module:
    where = f"{label}: module[{index}]"
    if not isinstance(table, dict):
        raise CliError(f"{where} must be a table of fields, got {type(table).__name__}")
    fields = dict(table)
    name = fields.pop("name", None)
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        raise CliError(
            f"{where}: name must be a non-empty string of at most 100 characters, got {show(name)}"
        )
    where = f"{label}: module {name!r}"
    if "num_ranks" in fields:  # Megatron MIMO's ModuleGridSpec spelling and defaults
        try:
            return Module(name, mimo_layout(fields))
        except TopologyError as error:
            raise CliError(f"{where} holds an invalid layout: {one_line(error)}") from None
    check_table(where, "", fields, TOPOLOGY_SCHEMA)
    if "world_size" not in fields:
        raise CliError(f"{where} has no world_size; give its number of ranks")
    try:
        return Module(name, Topology.from_dict(fields))
    except TopologyError as error:
        raise CliError(f"{where} holds an invalid layout: {one_line(error)}") from None
