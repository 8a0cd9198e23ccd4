"""Finding: one thing a launch would regret, with a severity and a stable code (private).

>>> Finding("error", "tp-larger-than-node", "tp(16) is larger than one 8-GPU node").ok
False
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from .._args import show
from .._errors import TopologyError
from .._fields import text
from .._layout.groups import Ranks

__all__ = ["SEVERITIES", "Finding"]

SEVERITIES = ("error", "warning", "info")
"""Finding severities, most severe first; an ``error`` makes ``Report.ok`` False."""


def _severity(_: object, __: object, value: str) -> None:
    if value not in SEVERITIES:
        raise TopologyError(f"severity must be one of {', '.join(SEVERITIES)}, got {show(value)}")


_REPR_MESSAGE = 600
"""A Finding's repr shows at most this many characters of its message."""


def _ranks(value: Any) -> Sequence[int]:
    if isinstance(value, (Ranks, range)):
        return Ranks.of(value)
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        raise TopologyError(f"Finding.example must be a sequence of ranks, got {show(value)}")
    if any(type(r) is not int for r in value):
        raise TopologyError(f"Finding.example must hold int ranks, got {show(value)}")
    return tuple(value)


@attrs.frozen(repr=False)
class Finding:
    """One thing a launch would regret: a severity, a stable code, a message and an example.

    ``code`` never changes between releases (scripts may match on it); ``example`` is one
    group that shows the problem (empty when the finding is about the whole layout): a tuple,
    or a lazy :class:`Ranks` (equal to the tuple of its ranks) for groups found by ``check``.

    >>> Finding("warning", "partial-node", "world_size 12 is not a multiple of 8", (8, 9)).ok
    True
    """

    severity: str = attrs.field(validator=_severity)
    code: str = attrs.field(validator=text)
    message: str = attrs.field(validator=text)
    example: Sequence[int] = attrs.field(default=(), converter=_ranks)

    @property
    def ok(self) -> bool:
        """True unless the severity is ``error``."""
        return self.severity != "error"

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: ``severity``, ``code``, ``message``, ``example`` (first 64 ranks) and
        ``example_size``."""
        return {
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "example": list(self.example[:64]),
            "example_size": len(self.example),
        }

    def __repr__(self) -> str:
        message = self.message
        if len(message) > _REPR_MESSAGE:
            message = message[: _REPR_MESSAGE - 1] + "…"
        example = self.example
        if isinstance(example, Ranks) or len(example) <= 16:
            shown = repr(example)
        else:
            shown = f"<{len(example)} ranks: {', '.join(map(str, example[:4]))}, …, {example[-1]}>"
        return f"Finding({self.severity!r}, {self.code[:80]!r}, {message!r}, {shown})"
