"""One rule for tests whose oracle or tool may be missing on a developer's machine: they skip
there, and fail under ``CI``, where ``scripts/setup.sh`` must have provided it (never skipped
silently in CI)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def missing(test: str, reason: str) -> NoReturn:
    """Skip ``test`` (what it is, e.g. "the GTP differential test") for ``reason``; under
    ``CI`` fail instead."""
    if os.environ.get("CI"):
        pytest.fail(f"{test} must run in CI: {reason}")
    pytest.skip(reason)
