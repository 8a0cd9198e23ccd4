"""pytest plugin: a ``mocker`` fixture for Megatron-LM's unit tests where pytest-mock is absent.

Loaded by ``scripts/peers/megatron_pgc.sh`` with ``-p megatron_mocker`` beside
``megatron_harness``. Megatron's ``test_process_groups_config.py`` asks ``mocker`` for
``mocker.Mock(spec=...)`` only; this fixture offers ``Mock``, ``MagicMock`` and ``patch`` from
:mod:`unittest.mock` (patches undone after the test). With pytest-mock installed it does nothing
and pytest-mock's own fixture serves.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest


class _Mocker:
    """The part of pytest-mock's ``MockerFixture`` the peer's tests use."""

    Mock = mock.Mock
    MagicMock = mock.MagicMock

    def __init__(self) -> None:
        self._patches: list[Any] = []

    def patch(self, target: str, *args: Any, **kwargs: Any) -> Any:
        patcher = mock.patch(target, *args, **kwargs)
        self._patches.append(patcher)
        return patcher.start()

    def stopall(self) -> None:
        while self._patches:
            self._patches.pop().stop()


if importlib.util.find_spec("pytest_mock") is None:

    @pytest.fixture
    def mocker() -> Iterator[_Mocker]:
        made = _Mocker()
        yield made
        made.stopall()
