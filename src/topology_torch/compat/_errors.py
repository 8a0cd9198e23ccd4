"""Errors a façade raises where its peer raises a built-in exception class.

Each one is a :class:`topology.TopologyError` (so ``except TopologyError`` catches every error of
this library) and also the class the peer raises, so the peer's callers and tests, written
against ``AssertionError`` or ``RuntimeError``, keep working unchanged.

>>> from topology import Topology, TopologyError
>>> try:
...     raise NotInitializedError("tensor parallel is not initialized; call initialize first")
... except AssertionError as error:
...     print(isinstance(error, TopologyError), error)
True tensor parallel is not initialized; call initialize first
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from topology import Topology, TopologyError

from .. import _default
from .._default import Owner
from .._process_groups import ProcessGroups

__all__ = [
    "FacadeAssertionError",
    "FacadeKeyError",
    "FacadeRuntimeError",
    "NotInitializedError",
    "as_assertion",
    "owned_groups",
]

T = TypeVar("T")


class FacadeAssertionError(TopologyError, AssertionError):
    """Bad use where the peer ``assert``s: a :class:`TopologyError` and an ``AssertionError``."""


class NotInitializedError(FacadeAssertionError):
    """A getter called before ``initialize`` (or after ``destroy``), as peers report it."""


class FacadeRuntimeError(TopologyError, RuntimeError):
    """Sizes the peer rejects at runtime: a :class:`TopologyError` and a ``RuntimeError``."""


class FacadeKeyError(TopologyError, KeyError):
    """A lookup the peer answers with ``KeyError``: a :class:`TopologyError` and a ``KeyError``
    (its message shown as written, not quoted as ``KeyError`` shows its key)."""

    __str__ = TopologyError.__str__


def as_assertion(call: Callable[[], T]) -> T:
    """Run ``call``, re-raising a plain ``TopologyError`` as :class:`FacadeAssertionError`."""
    try:
        return call()
    except FacadeAssertionError:
        raise
    except TopologyError as error:
        raise FacadeAssertionError(str(error)) from error


def owned_groups(owner: Owner) -> ProcessGroups:
    """The default process groups ``owner``'s façade made; a :class:`NotInitializedError` (the
    peer's ``AssertionError``) naming the fix when it made none, or another façade did."""
    try:
        return _default.owned(owner)
    except TopologyError as error:
        raise NotInitializedError(str(error)) from None


def topology_of(groups: ProcessGroups) -> Topology:
    """The Topology ``groups`` were made from; a ``TopologyError`` for groups of a Grid, which
    have none of Megatron's settings (distributed-optimizer instances, virtual stages)."""
    layout = groups.topology
    if not isinstance(layout, Topology):
        raise TopologyError(f"these groups were made from {layout!r}, and this needs a Topology")
    return layout
